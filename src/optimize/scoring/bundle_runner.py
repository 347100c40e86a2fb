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

The process runs in the bubblewrap sandbox (`sandbox.py`, docs/sandbox.md; `runner.isolation == "bubblewrap
sandbox"`): it sees the bundle (read-only, at /bundle), the Python installation and /usr, a private tmpfs as /tmp
and HOME, and nothing else of the host (not the data dir, the database, the blobs, other processes, the network
or the server's environment: only PATH, locale, time zone and Python settings are passed). Where no sandbox
starts, the runner refuses (Unavailable, naming bubblewrap) unless the operator set the unsafe opt-out
`OPTIMIZE_UNSANDBOXED_BUNDLES=1`: the process then runs as the server's user, in a network namespace where the
kernel allows one (`runner.isolation == "no sandbox (network namespace)"`) and otherwise behind only an
in-process guard against sockets (`"no sandbox (in-process guard)"`), its HOME and TMPDIR private folders.

Limits (`BundleRunner(..., time_limit_s=10, memory_limit_mb=1024, start_timeout_s=30, process_limit=64)`): a
sample that takes longer than `time_limit_s` (wall clock) has its process killed and scores `took longer than
10 s`, and a fresh process scores the samples after it; the address space is capped at `memory_limit_mb` (a
MemoryError is the sample's error) and the CPU time per sample too; in the sandbox the processes and threads at
`process_limit`, the private /tmp at `tmp_mb`; open files and the size of a written file are capped too; what the
bundle prints is discarded; a process that dies (a crash, `os._exit`) fails that sample and is restarted; closing
the runner (or losing the process) ends every process the bundle started. Every text from the process that reaches
a caller (an error, a trace, the names a module defines) is cut to a bound. In the sandbox or not, socket calls
raise `PermissionError("scoring bundles have no network")` (an in-process guard, for a clear message).

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
from optimize.scoring import sandbox as sandboxes
from optimize.scoring.members import parse_function
from optimize.scoring.samples import Sample, Score

DEFAULT_TIME_LIMIT_S = 10.0
DEFAULT_MEMORY_LIMIT_MB = 1024
DEFAULT_START_TIMEOUT_S = 30.0
DEFAULT_GIVE_UP_AFTER = 8
MAX_BUNDLE_FILES = 10_000
MAX_BUNDLE_BYTES = 256 * 1024 * 1024  # uncompressed
MAX_ANSWER_BYTES = 1024 * 1024
MAX_ERROR_CHARS = 1000  # one error text from the process, as a caller sees it
MAX_TRACE_FRAMES = 20
OPEN_FILES = sandboxes.DEFAULT_OPEN_FILES
FILE_SIZE_MB = 256  # one file the bundle writes (in its private /tmp, where the tmpfs bounds it first)
_CHILD = Path(__file__).with_name("bundle_child.py")
_ENV_KEPT = ("PATH", "LANG", "LANGUAGE", "TZ", "PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "CONDA_PREFIX",
             "LD_LIBRARY_PATH", "SYSTEMROOT")
# host paths that mean nothing in the sandbox (where only /usr and this Python's folders are): not passed there
_ENV_HOST_ONLY = ("PATH", "PYTHONPATH", "LD_LIBRARY_PATH", "VIRTUAL_ENV", "CONDA_PREFIX", "SYSTEMROOT")


def _seconds(value: float) -> str:
    return f"{value:g}"


def _bounded(text: object, limit: int = MAX_ERROR_CHARS) -> str:
    """A text from the scoring process as a caller may see it: a string, cut to `limit` characters."""
    text = text if isinstance(text, str) else ""
    return text if len(text) <= limit else text[:limit - 3] + "..."


class _Child:
    """One running child process and its protocol pipes."""

    def __init__(self, process: subprocess.Popen, sandboxed: bool = False) -> None:
        self.process = process
        self.sandboxed = sandboxed  # bwrap reports a child ended by signal N as exit code 128 + N
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
        return describe_exit(code, self.sandboxed)

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


def describe_exit(code: int | None, sandboxed: bool = False) -> str:
    if code is None:
        return "did not end"
    if sandboxed and 128 < code < 128 + 65:
        code = 128 - code
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
                 give_up_after: int = DEFAULT_GIVE_UP_AFTER, label: str | None = None, isolate: bool = True,
                 process_limit: int = sandboxes.DEFAULT_PROCESS_LIMIT, tmp_mb: int = sandboxes.DEFAULT_TMP_MB) -> None:
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
        self.process_limit = int(process_limit)
        self.tmp_mb = int(tmp_mb)
        self.isolation: str | None = None  # how the child is kept from the host, once it has started
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
            error = _bounded(error) if isinstance(error, str) else None
            return Score(None if value is None else float(value), error), False
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
        try:
            sandbox = sandboxes.require_sandbox()
        except Unavailable as error:
            raise Unavailable(f"the scoring bundle {self.label} cannot run: {error.message}", hint=error.hint) from None
        if self._state.workdir is None:
            self._prepare()
        workdir = self._state.workdir
        assert workdir is not None and self._package is not None
        box = workdir / "box"
        config = {"package": self._package, "module": self.module, "function": self.function,
                  "memoryLimitMb": self.memory_limit_mb, "timeLimitS": self.time_limit_s,
                  "startTimeoutS": self.start_timeout_s, "openFiles": OPEN_FILES, "fileSizeMb": FILE_SIZE_MB}
        if sandbox is not None:
            inside = f"{sandboxes.BUNDLE_DIR}/src"
            config |= {"root": inside, "isolate": False, "processLimit": self.process_limit, "user": sandbox.user()}
            env = self._environment(home=sandboxes.TMP_DIR, path=f"{os.path.dirname(sys.executable)}:/usr/bin:/bin")
            argv = sandbox.command(box, [sys.executable, f"{sandboxes.BUNDLE_DIR}/bundle_child.py", json.dumps(config)],
                                   env, tmp_mb=self.tmp_mb, workdir=f"{inside}/{self._package}")
            popen: dict[str, Any] = {"env": {"PATH": "/usr/bin:/bin"}}  # bwrap's own, seen as /proc/1/environ
        else:
            config |= {"root": str(box / "src"), "isolate": self.isolate}
            argv = [sys.executable, str(box / "bundle_child.py"), json.dumps(config)]
            popen = {"env": self._environment(home=str(workdir / "home")), "cwd": str(box / "src" / self._package)}
        try:
            # what the bundle prints is discarded: it must not flood the server's log
            process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                       start_new_session=True, bufsize=0, **popen)
        except OSError as error:
            raise Unavailable(f"the scoring process for {self.label} could not start: {error.strerror}") from None
        self.starts += 1
        child = _Child(process, sandboxed=sandbox is not None)
        self._state.child = child
        answer = child.receive(time.monotonic() + self.start_timeout_s)
        if isinstance(answer, dict) and answer.get("ready") is True:
            how = _bounded(answer.get("isolation"), 100)
            self.isolation = sandboxes.ISOLATION if sandbox is not None else f"no sandbox ({how})"
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
        stage, error = answer.get("stage"), _bounded(answer.get("error"))
        if stage == "module":
            raise Invalid(f"the scoring bundle {self.label} has no module {self.module}: {error}",
                          hint=f"the bundle holds: {self._contents()}; name a module inside it (a dotted path "
                               "without .py)", module=self.module)
        if stage == "function":
            defines = answer.get("defines")
            defines = [_bounded(name, 100) for name in defines[:20]] if isinstance(defines, list) else []
            raise Invalid(f"{where} has no function {self.function}",
                          hint=(f"it defines: {', '.join(defines)}" if defines else "it defines no functions")
                          + f"; write `def {self.function}(prompt_messages, completion_text, fields)` or name "
                            "another function as MODULE:FUNCTION", module=self.module, function=self.function)
        if stage == "signature":
            raise Invalid(f"{self.module}:{self.function} of the scoring bundle {self.label} {error}",
                          hint=f"write `def {self.function}(prompt_messages, completion_text, fields)`",
                          module=self.module, function=self.function)
        trace = answer.get("trace")
        trace = [_bounded(frame, 200) for frame in trace[-MAX_TRACE_FRAMES:]] if isinstance(trace, list) else []
        raise Invalid(f"importing {where} failed: {error}", hint="fix the bundle's code and push it again",
                      module=self.module, trace=trace)

    def _environment(self, home: str, path: str | None = None) -> dict[str, str]:
        env = {key: value for key, value in os.environ.items()
               if (key in _ENV_KEPT or key.startswith("LC_")) and not (path and key in _ENV_HOST_ONLY)}
        if path:
            env["PATH"] = path
        env.update(HOME=home, TMPDIR=home, PYTHONDONTWRITEBYTECODE="1", PYTHONIOENCODING="utf-8",
                   PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1",
                   NUMEXPR_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
        return env

    def _contents(self) -> str:
        workdir = self._state.workdir
        root = workdir / "box" / "src" / self._package if workdir and self._package else None
        if root is None or not root.is_dir():
            return "nothing"
        names = sorted(f"{p.name}/" if p.is_dir() else p.name for p in root.iterdir() if p.name != "__pycache__")
        shown = [_bounded(name, 100) for name in names[:20]]
        return ", ".join(shown) + (", ..." if len(names) > 20 else "") if names else "nothing"

    def _prepare(self) -> None:
        """Copy the bundle into a private folder, as a package named for its digest, beside the child's script.

        The folder is the runner's own (mode 0700); `box` inside it is what the sandbox sees at /bundle, readable
        by the sandbox's own user and by no one else on the host (its parent is closed to them)."""
        workdir = Path(tempfile.mkdtemp(prefix="optimize-scoring-"))
        self._state.workdir = workdir
        try:
            (workdir / "home").mkdir(mode=0o700)
            box = workdir / "box"
            staging = box / "src" / "staging"
            staging.mkdir(parents=True)
            shutil.copyfile(_CHILD, box / "bundle_child.py")
            if self.source.is_dir():
                self.digest = _copy_folder(self.source, staging, self.label)
            elif self.source.is_file():
                self.digest = _extract_zip(self.source, staging, self.label)
            else:
                raise Invalid(f"the scoring bundle {self.label} is not a file or folder here: {self.source}")
            self._package = f"optimize_bundle_{self.digest[:12]}"
            staging.rename(box / "src" / self._package)
            _readable(box)
        except BaseException:
            self._state.release()
            raise


def _readable(root: Path) -> None:
    """Folders 0755 and files 0644 under `root` (whatever the umask), so the sandbox's own user can read them."""
    root.chmod(0o755)
    for folder, dirs, files in os.walk(root):
        for name in dirs:
            os.chmod(os.path.join(folder, name), 0o755)
        for name in files:
            os.chmod(os.path.join(folder, name), 0o644)


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
