"""Showing a base-model selection's hub download while `select` waits for it: the server answers `select` when the
model is ready, so the command asks the entry (`GET …/base-models/{id}`, its `download`) once a second meanwhile.

A Rich bar on a terminal; plain lines on stderr otherwise (the first at once, then at most one every
PLAIN_EVERY seconds); nothing in JSON modes. Ctrl-C stops the waiting, not the selection, and says so.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import TYPE_CHECKING, Any

from optimize.cli.output import CommandFailed, Output, console, print_error
from optimize.cli.safe_text import escape_controls
from optimize.core.sizes import human_size

if TYPE_CHECKING:
    from optimize.client.api import OptimizeApi

POLL_EVERY = 1.0
PLAIN_EVERY = 5.0
INTERRUPTED = 130


def select_showing_download(api: OptimizeApi, out: Output, model: str, **options: Any) -> dict[str, Any]:
    """`api.base_models.select(model, **options)`, showing the download it makes while it runs."""
    answer: dict[str, Any] = {}

    def call() -> None:
        try:
            answer["data"] = api.base_models.select(model, **options)
        except BaseException as error:  # noqa: BLE001 - handed to the waiting thread, which raises it
            answer["error"] = error

    worker = threading.Thread(target=call, name="select", daemon=True)
    worker.start()
    view = _view(out)
    try:
        while not _finished(worker):
            download = _download(api, model)
            if download is not None:
                view.show(download)
    except KeyboardInterrupt:
        view.close()
        message = f"stopped waiting for {model}; the server goes on selecting it"
        hint = f"see it with: akka training base-models get {model}"
        if out.is_json:
            print_error(message, hint, code="interrupted")
        else:
            console(stderr=True).print(f"{message[0].upper()}{message[1:]}; {hint}.", markup=False)
        raise CommandFailed(INTERRUPTED) from None
    view.close()
    if "error" in answer:
        raise answer["error"]
    return answer["data"]


def _finished(worker: threading.Thread) -> bool:
    worker.join(POLL_EVERY)
    return not worker.is_alive()


def _download(api: OptimizeApi, model: str) -> dict[str, Any] | None:
    from optimize.client.http import ApiError

    try:
        return api.base_models.get(model).get("download")
    except ApiError:
        return None  # the answer to `select` says what went wrong


def plain_line(download: dict[str, Any]) -> str:
    total = download.get("totalBytes")
    received = min(download["bytes"], total) if total else download["bytes"]
    of = f" of {human_size(total)} ({100 * received // total}%)" if total else ""
    return f"Downloading {download['repository']} at {download['commit'][:12]}: {human_size(received)}{of}"


def _view(out: Output):
    if out.is_json:
        return _Quiet()
    if sys.stderr.isatty():
        return _Bar()
    return _Lines()


class _Quiet:
    def show(self, download: dict[str, Any]) -> None:
        pass

    def close(self) -> None:
        pass


class _Lines(_Quiet):
    def __init__(self) -> None:
        self.printed_at: float | None = None

    def show(self, download: dict[str, Any]) -> None:
        now = time.monotonic()
        if self.printed_at is None or now - self.printed_at >= PLAIN_EVERY:
            print(escape_controls(plain_line(download)), file=sys.stderr, flush=True)
            self.printed_at = now


class _Bar(_Quiet):
    def __init__(self) -> None:
        self.bar = None
        self.task = None

    def show(self, download: dict[str, Any]) -> None:
        if self.bar is None:
            from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn

            self.bar = Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(),
                                TransferSpeedColumn(), console=console(stderr=True), transient=True)
            self.bar.start()
            self.task = self.bar.add_task(f"{download['repository']} at {download['commit'][:12]}",
                                          total=download.get("totalBytes"))
        self.bar.update(self.task, completed=download["bytes"])

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()
