"""Run a scoring bundle's function in a separate, limited process.

A scoring bundle is a ZIP (or an extracted folder) of Python modules and data files, e.g. `reward.py`,
`helpers.py`, `tables/schema.json`. Its function is named `MODULE[:FUNCTION]`: MODULE a dotted path inside the
bundle (`reward`, `pkg.reward`), FUNCTION a name in it (default `compute_score`). The bundle is loaded as a
package, so sibling imports are relative (`from . import helpers`) and data files are found relative to the
module (`Path(__file__).parent / "tables" / "schema.json"`); the working directory is the bundle's top folder.

Calling convention — the function is called once per sample as

    compute_score(prompt_messages, completion_text, fields) -> float | int | bool | None

- `prompt_messages`: the chat messages before the answer (`[{"role": "user", "content": "..."}, ...]`);
- `completion_text`: the model's answer, a string;
- `fields`: the row's top-level fields other than `messages` (`answer`, `label`, `metadata`, ...), plus
  `expected`: the row's final assistant message text, or None when the row has none (a row's own top-level
  `expected` field, if it has one, is passed unchanged instead);

and returns a number (a bool counts as 0 or 1; NaN and infinities are errors) or None (the function does not
apply to this sample). Anything else returned, or raised, is that sample's error, e.g.
`ValueError: no answer found (reward.py line 12)`.

Limits (`BundleRunner(..., time_limit_s=10, memory_limit_mb=1024, start_timeout_s=30)`): a sample that takes
longer than `time_limit_s` (wall clock) has its process killed and scores `took longer than 10 s`, and a fresh
process scores the samples after it; the address space is capped at `memory_limit_mb` (a MemoryError is the
sample's error) and the CPU time per sample too; a process that dies (a crash, `os._exit`) fails that sample and
is restarted. The process has no network: a new network namespace where the kernel allows unprivileged ones
(`runner.isolation == "network namespace"`), and in any case an in-process guard that makes `socket.socket`,
`socket.create_connection` and `socket.getaddrinfo` raise `PermissionError("scoring bundles have no network")`
(a guard against accidents, not a sandbox: `runner.isolation == "in-process guard"` says only that one holds).
Its environment holds no secrets (no `OPTIMIZE_*` variable, no credentials: only PATH, locale, time zone and the
Python path variables), and its HOME and TMPDIR are private folders removed on `close()`.

`score()` never raises for a sample's failure and never hangs: each sample gets one attempt within its time limit;
after `give_up_after` samples in a row lost the process (timeouts, crashes), the rest of that batch is left
unscored with the reason. A runner is used by one thread at a time (calls are serialised).
"""

from __future__ import annotations

import hashlib
import json
import os
import select
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
import weakref
import zipfile
from pathlib import Path, PurePosixPath
from typing import Any

from optimize.core.errors import Invalid, PlatformError, TooLarge, Unavailable
from optimize.scoring.members import parse_function
from optimize.scoring.samples import Sample, Score

DEFAULT_TIME_LIMIT_S = 10.0
DEFAULT_MEMORY_LIMIT_MB = 1024
DEFAULT_START_TIMEOUT_S = 30.0
DEFAULT_GIVE_UP_AFTER = 8
MAX_BUNDLE_FILES = 10_000
MAX_BUNDLE_BYTES = 256 * 1024 * 1024  # uncompressed
MAX_ANSWER_BYTES = 1024 * 1024
_CHILD = Path(__file__).with_name("bundle_child.py")
_ENV_KEPT = ("PATH", "LANG", "LANGUAGE", "TZ", "PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "CONDA_PREFIX",
             "LD_LIBRARY_PATH", "SYSTEMROOT")


def _seconds(value: float) -> str:
    return f"{value:g}"


class _Child:
    """One running child process and its protocol pipes."""

    def __init__(self, process: subprocess.Popen) -> None:
        self.process = process
        self.stdin = process.stdin.fileno()
        self.stdout = process.stdout.fileno()
        os.set_blocking(self.stdin, False)
        self.buffer = b""

    def send(self, message: dict[str, Any], deadline: float) -> str:
        """Write one request line before the deadline: `"sent"`, `"timeout"` or `"closed"` (the child ended)."""
        data = json.dumps(message, ensure_ascii=False, default=str).encode() + b"\n"
        view = memoryview(data)
        while view:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return "timeout"
            _, ready, _ = select.select([], [self.stdin], [], remaining)
            if not ready:
                continue
            try:
                written = os.write(self.stdin, view)
            except BlockingIOError:
                continue
            except OSError:
                return "closed"
            view = view[written:]
        return "sent"

    def receive(self, deadline: float) -> dict[str, Any] | str:
        """The next JSON line, or `"timeout"`, `"closed"` (the child ended) or `"garbled"`."""
        while b"\n" not in self.buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return "timeout"
            ready, _, _ = select.select([self.stdout], [], [], remaining)
            if not ready:
                continue
            chunk = os.read(self.stdout, 65536)
            if not chunk:
                return "closed"
            self.buffer += chunk
            if len(self.buffer) > MAX_ANSWER_BYTES:
                return "garbled"
        line, _, self.buffer = self.buffer.partition(b"\n")
        try:
            message = json.loads(line)
        except ValueError:
            return "garbled"
        return message if isinstance(message, dict) else "garbled"

    def ended(self, wait_s: float = 5.0) -> str:
        """Collect the exit of a child that closed its pipe, then stop anything it left behind; says how it ended."""
        try:
            code = self.process.wait(wait_s)
        except subprocess.TimeoutExpired:
            self.kill()
            code = self.process.returncode
        self._kill_group()
        return describe_exit(code)

    def kill(self) -> None:
        if self.process.poll() is None:
            self._kill_group()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL is not refused
            pass
        self._kill_group()
        self.close_pipes()

    def _kill_group(self) -> None:
        # the child leads its own session, and its process group id stays reserved while any member lives
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def close_pipes(self) -> None:
        for pipe in (self.process.stdin, self.process.stdout):
            try:
                pipe.close()
            except OSError:
                pass


def describe_exit(code: int | None) -> str:
    if code is None:
        return "did not end"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"was ended by {name}"
    return f"exited with code {code}"


class _State:
    """What a runner must release, kept apart from it so a finalizer can release it too."""

    def __init__(self) -> None:
        self.child: _Child | None = None
        self.workdir: Path | None = None

    def stop_child(self) -> None:
        child, self.child = self.child, None
        if child is not None:
            child.kill()

    def release(self) -> None:
        self.stop_child()
        workdir, self.workdir = self.workdir, None
        if workdir is not None:
            shutil.rmtree(workdir, ignore_errors=True)


class BundleRunner:
    """A scoring bundle's function, run in one child process with limits (see the module's docstring).

    Use as a context manager (entering checks the bundle: `check()`), or call `check()`/`score()` then `close()`.
    `source` is the bundle's ZIP file or folder; `function` is `MODULE[:FUNCTION]`; `label` names the bundle in
    messages (e.g. its registry reference; default: the file's name).
    """

    def __init__(self, source: Path | str, function: str, *, time_limit_s: float = DEFAULT_TIME_LIMIT_S,
                 memory_limit_mb: int = DEFAULT_MEMORY_LIMIT_MB, start_timeout_s: float = DEFAULT_START_TIMEOUT_S,
                 give_up_after: int = DEFAULT_GIVE_UP_AFTER, label: str | None = None, isolate: bool = True) -> None:
        try:
            self.module, self.function = parse_function(function)
        except ValueError as error:
            raise Invalid(f"function: {error}") from None
        self.source = Path(source)
        self.label = label or self.source.name
        self.time_limit_s = float(time_limit_s)
        self.memory_limit_mb = int(memory_limit_mb)
        self.start_timeout_s = float(start_timeout_s)
        self.give_up_after = int(give_up_after)
        self.isolate = isolate
        self.isolation: str | None = None  # how the child is kept off the network, once it has started
        self.digest: str | None = None  # sha256 of the ZIP's bytes (of the folder's files, for a folder)
        self.starts = 0  # child processes started so far
        self._package: str | None = None
        self._lock = threading.Lock()
        self._state = _State()
        self._finalizer = weakref.finalize(self, _State.release, self._state)

    # --- lifecycle -------------------------------------------------------------------------------------------------

    def __enter__(self) -> BundleRunner:
        try:
            self.check()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def check(self) -> None:
        """Start the process, import the module and resolve the function; Invalid naming the module or function
        (with the import's error, located in the bundle's own files) when that fails."""
        with self._lock:
            self._start()

    def close(self) -> None:
        """Kill the process and remove the extracted bundle; the runner can start again later."""
        with self._lock:
            self._state.release()
            self._package = None

    @property
    def running(self) -> bool:
        child = self._state.child
        return child is not None and child.process.poll() is None

    @property
    def pid(self) -> int | None:
        return self._state.child.process.pid if self._state.child else None

    # --- scoring ---------------------------------------------------------------------------------------------------

    def score(self, samples: list[Sample]) -> list[Score]:
        """One Score per sample, in order. Never raises for a sample's failure (see the module's docstring)."""
        with self._lock:
            scores: list[Score] = []
            lost_in_a_row, last_loss = 0, ""
            for index, sample in enumerate(samples):
                if lost_in_a_row >= self.give_up_after:
                    reason = (f"not scored: the scoring process was lost on {lost_in_a_row} samples in a row "
                              f"(the last one {last_loss})")
                    scores.extend(Score(None, reason) for _ in samples[index:])
                    break
                if self._state.child is None:
                    try:
                        self._start()
                    except PlatformError as error:
                        reason = f"the scoring process could not start: {error.message}"
                        scores.extend(Score(None, reason) for _ in samples[index:])
                        break
                score, lost = self._score_one(sample)
                scores.append(score)
                lost_in_a_row, last_loss = (lost_in_a_row + 1, score.error or "") if lost else (0, "")
            return scores

    def _score_one(self, sample: Sample) -> tuple[Score, bool]:
        """The sample's score, and whether the process was lost (killed or ended) on it."""
        child = self._state.child
        assert child is not None
        fields = dict(sample.fields)
        fields.setdefault("expected", sample.expected)
        request = {"prompt": sample.prompt, "completion": sample.completion, "fields": fields}
        deadline = time.monotonic() + self.time_limit_s
        sent = child.send(request, deadline)
        answer = child.receive(deadline) if sent == "sent" else sent
        if isinstance(answer, dict):
            value = answer.get("value")
            error = answer.get("error")
            if value is not None and not isinstance(value, (int, float)):
                return Score(None, "the scoring process answered garbled output"), False
            return Score(None if value is None else float(value), error if isinstance(error, str) else None), False
        if answer == "timeout" and child.process.poll() is None:
            self._state.stop_child()
            return Score(None, f"took longer than {_seconds(self.time_limit_s)} s"), True
        if answer == "garbled":
            self._state.stop_child()
            return Score(None, "the scoring process answered garbled output"), True
        how = child.ended()
        self._state.stop_child()
        if how == "was ended by SIGXCPU":
            return Score(None, f"used more than {_seconds(self.time_limit_s)} s of CPU time"), True
        return Score(None, f"the scoring process {how} while scoring this sample"), True

    # --- starting --------------------------------------------------------------------------------------------------

    def _start(self) -> None:
        if self._state.child is not None:
            if self._state.child.process.poll() is None:
                return
            self._state.stop_child()
        if self._state.workdir is None:
            self._prepare()
        workdir = self._state.workdir
        assert workdir is not None and self._package is not None
        config = {"root": str(workdir / "src"), "package": self._package, "module": self.module,
                  "function": self.function, "memoryLimitMb": self.memory_limit_mb, "timeLimitS": self.time_limit_s,
                  "startTimeoutS": self.start_timeout_s, "isolate": self.isolate}
        try:
            process = subprocess.Popen([sys.executable, str(_CHILD), json.dumps(config)], stdin=subprocess.PIPE,
                                       stdout=subprocess.PIPE, cwd=str(workdir / "src" / self._package),
                                       env=self._environment(workdir), start_new_session=True, bufsize=0)
        except OSError as error:
            raise Unavailable(f"the scoring process for {self.label} could not start: {error}") from None
        self.starts += 1
        child = _Child(process)
        self._state.child = child
        answer = child.receive(time.monotonic() + self.start_timeout_s)
        if isinstance(answer, dict) and answer.get("ready") is True:
            self.isolation = answer.get("isolation")
            return
        where = f"module {self.module} of the scoring bundle {self.label}"
        if answer == "timeout":
            self._state.stop_child()
            raise Invalid(f"importing {where} took longer than {_seconds(self.start_timeout_s)} s",
                          hint="move slow work out of the module's top level, or load it on the first call")
        if not isinstance(answer, dict):
            how = child.ended() if answer == "closed" else "answered garbled output"
            self._state.stop_child()
            raise Invalid(f"importing {where}: the scoring process {how}",
                          hint="run the module on its own to see why it crashes")
        self._state.stop_child()
        stage, error = answer.get("stage"), answer.get("error") or ""
        if stage == "module":
            raise Invalid(f"the scoring bundle {self.label} has no module {self.module}: {error}",
                          hint=f"the bundle holds: {self._contents()}; name a module inside it (a dotted path "
                               "without .py)", module=self.module)
        if stage == "function":
            defines = answer.get("defines") or []
            raise Invalid(f"{where} has no function {self.function}",
                          hint=(f"it defines: {', '.join(defines)}" if defines else "it defines no functions")
                          + f"; write `def {self.function}(prompt_messages, completion_text, fields)` or name "
                            "another function as MODULE:FUNCTION", module=self.module, function=self.function)
        if stage == "signature":
            raise Invalid(f"{self.module}:{self.function} of the scoring bundle {self.label} {error}",
                          hint=f"write `def {self.function}(prompt_messages, completion_text, fields)`",
                          module=self.module, function=self.function)
        raise Invalid(f"importing {where} failed: {error}", hint="fix the bundle's code and push it again",
                      module=self.module, trace=answer.get("trace") or [])

    def _environment(self, workdir: Path) -> dict[str, str]:
        env = {key: value for key, value in os.environ.items() if key in _ENV_KEPT or key.startswith("LC_")}
        home = workdir / "home"
        env.update(HOME=str(home), TMPDIR=str(home), PYTHONDONTWRITEBYTECODE="1", PYTHONIOENCODING="utf-8",
                   PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1",
                   NUMEXPR_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
        return env

    def _contents(self) -> str:
        root = self._state.workdir / "src" / self._package if self._state.workdir and self._package else None
        if root is None or not root.is_dir():
            return "nothing"
        names = sorted(f"{p.name}/" if p.is_dir() else p.name for p in root.iterdir() if p.name != "__pycache__")
        return ", ".join(names[:20]) + (", ..." if len(names) > 20 else "") if names else "nothing"

    def _prepare(self) -> None:
        """Copy the bundle into a private folder, as a package named for its digest."""
        workdir = Path(tempfile.mkdtemp(prefix="optimize-scoring-"))
        self._state.workdir = workdir
        try:
            (workdir / "home").mkdir()
            staging = workdir / "src" / "staging"
            staging.mkdir(parents=True)
            if self.source.is_dir():
                self.digest = _copy_folder(self.source, staging, self.label)
            elif self.source.is_file():
                self.digest = _extract_zip(self.source, staging, self.label)
            else:
                raise Invalid(f"the scoring bundle {self.label} is not a file or folder here: {self.source}")
            self._package = f"optimize_bundle_{self.digest[:12]}"
            staging.rename(workdir / "src" / self._package)
        except BaseException:
            self._state.release()
            raise


def _check_count(count: int, size: int, label: str) -> None:
    if count > MAX_BUNDLE_FILES:
        raise TooLarge(f"the scoring bundle {label} holds more than {MAX_BUNDLE_FILES} files")
    if size > MAX_BUNDLE_BYTES:
        raise TooLarge(f"the scoring bundle {label} holds more than {MAX_BUNDLE_BYTES // (1024 * 1024)} MiB "
                       "of files")


def _extract_zip(path: Path, dest: Path, label: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as error:
        raise Invalid(f"the scoring bundle {label} is not a ZIP archive: {error}") from None
    with archive:
        infos = archive.infolist()
        _check_count(len(infos), sum(info.file_size for info in infos), label)
        written = 0
        for info in infos:
            name = info.filename
            parts = PurePosixPath(name).parts
            if not parts or name.startswith("/") or "\\" in name or ".." in parts or ":" in parts[0]:
                raise Invalid(f"the scoring bundle {label} holds a path outside it: {name!r}")
            kind = stat.S_IFMT(info.external_attr >> 16)
            if kind and kind not in (stat.S_IFREG, stat.S_IFDIR):
                raise Invalid(f"the scoring bundle {label} holds {name!r}, which is not a regular file or folder "
                              "(a link?)")
            target = dest.joinpath(*parts)
            if info.is_dir():
                target.mkdir(parents=True, exist_ok=True)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            try:
                with archive.open(info) as source, open(target, "wb") as out:
                    for block in iter(lambda: source.read(1 << 20), b""):
                        written += len(block)
                        _check_count(0, written, label)
                        out.write(block)
            except (zipfile.BadZipFile, OSError, EOFError) as error:
                raise Invalid(f"the scoring bundle {label} could not be read at {name!r}: {error}") from None
    return digest.hexdigest()


def _copy_folder(source: Path, dest: Path, label: str) -> str:
    digest = hashlib.sha256()
    count = size = 0
    for folder, dirs, files in os.walk(source, followlinks=False):
        dirs.sort()
        relative = Path(folder).relative_to(source)
        for name in sorted(dirs + files):
            path = Path(folder) / name
            mode = path.lstat().st_mode
            rel = (relative / name).as_posix()
            if stat.S_ISDIR(mode):
                (dest / rel).mkdir(parents=True, exist_ok=True)
                continue
            if not stat.S_ISREG(mode):
                raise Invalid(f"the scoring bundle {label} holds {rel!r}, which is not a regular file or folder "
                              "(a link?)")
            count += 1
            size += path.stat().st_size
            _check_count(count, size, label)
            shutil.copyfile(path, dest / rel)
            digest.update(rel.encode() + b"\0" + hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()
