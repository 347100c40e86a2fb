"""The process a `BundleRunner` starts to run a scoring bundle's function: `python bundle_child.py CONFIG_JSON`
(by file path, so it imports nothing of ours; `python -m optimize.scoring.bundle_child CONFIG_JSON` works too).

It normally runs in the bubblewrap sandbox (`sandbox.py`); started there by root, it first becomes the user id
the runner picked (`user`), with no capabilities and no way to gain any (no_new_privs). Before any bundle code is
imported it: keeps the protocol on private copies of stdin/stdout (the bundle's own `print` goes to stderr, which
the runner discards; its reads of stdin see nothing); outside the sandbox only (the operator's unsafe opt-out),
moves into a new network namespace where the kernel allows it (unprivileged user namespaces), which leaves the
process no network at all; replaces `socket.socket`,
`socket.create_connection`, `socket.getaddrinfo` (and the host-name lookups) with ones raising
`PermissionError("scoring bundles have no network")` — an in-process guard, not a sandbox: code that means to can
reach the C `_socket` module; caps its address space (RLIMIT_AS), open files (RLIMIT_NOFILE), the size of a file
it writes (RLIMIT_FSIZE), in the sandbox its processes and threads (RLIMIT_NPROC), and, per sample, its CPU time
(RLIMIT_CPU); turns core dumps off; and works in the extracted bundle's folder. The environment it gets holds no
secrets (the runner passes only PATH, locale, time zone and Python settings).

Protocol (one JSON object per line): it answers `{"ready": true, "isolation": ...}` once the function is resolved,
or `{"ready": false, "stage": ..., "error": ..., "trace": [...]}`; then reads `{"prompt", "completion", "fields"}`
and answers `{"value": float | null, "error": str | null}` for each, until its stdin closes.
"""

from __future__ import annotations

import json
import math
import os
import sys

NO_NETWORK = "scoring bundles have no network"
CLONE_NEWUSER, CLONE_NEWNET = 0x10000000, 0x40000000
PR_SET_NO_NEW_PRIVS = 38
MAX_TEXT = 500  # characters of one error text
MAX_FRAMES = 20


def _isolate_network() -> str:
    """A new user + network namespace (no interfaces but a down loopback) when the kernel allows it."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        uid, gid = os.getuid(), os.getgid()
        if libc.unshare(CLONE_NEWUSER | CLONE_NEWNET) != 0:
            return "in-process guard"
        # map our own ids, so files keep their owner and new files can be created
        for path, text in (("/proc/self/setgroups", "deny"), ("/proc/self/uid_map", f"{uid} {uid} 1"),
                           ("/proc/self/gid_map", f"{gid} {gid} 1")):
            try:
                with open(path, "w") as handle:
                    handle.write(text)
            except OSError:
                pass
        return "network namespace"
    except Exception:  # noqa: BLE001 - any platform without it keeps the in-process guard
        return "in-process guard"


def _guard_sockets() -> None:
    import socket

    def refuse(*_args: object, **_kwargs: object):
        raise PermissionError(NO_NETWORK)

    class GuardedSocket(socket.socket):
        """Sockets over a network are refused; Unix sockets (socketpair, asyncio's self-pipe) still work."""

        def __init__(self, family: int = -1, type: int = -1, proto: int = -1, fileno: int | None = None) -> None:
            if fileno is None and family != socket.AF_UNIX:
                raise PermissionError(NO_NETWORK)
            super().__init__(family, type, proto, fileno)

    socket.socket = GuardedSocket  # type: ignore[misc]
    for name in ("create_connection", "create_server", "getaddrinfo", "gethostbyname", "gethostbyname_ex",
                 "gethostbyaddr", "getnameinfo"):
        setattr(socket, name, refuse)


def _become(user: int) -> None:
    """Drop root for `user` (no groups, no capabilities) and forbid gaining privileges again (no_new_privs), so a
    setuid program cannot give them back and the kernel counts this user's processes against RLIMIT_NPROC."""
    import ctypes

    os.setgroups([])
    os.setresgid(user, user, user)
    os.setresuid(user, user, user)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
    if os.getuid() != user or os.geteuid() != user or os.getgroups():
        raise OSError("the scoring process could not drop its privileges")


def _limit(memory_limit_mb: int, process_limit: int | None = None, open_files: int | None = None,
           file_size_mb: int | None = None) -> None:
    import resource

    limits = [(resource.RLIMIT_AS, memory_limit_mb * 1024 * 1024), (resource.RLIMIT_CORE, 0)]
    if process_limit:
        limits.append((resource.RLIMIT_NPROC, process_limit))
    if open_files:
        limits.append((resource.RLIMIT_NOFILE, open_files))
    if file_size_mb:
        limits.append((resource.RLIMIT_FSIZE, file_size_mb * 1024 * 1024))
    for which, limit in limits:
        _, hard = resource.getrlimit(which)
        if hard != resource.RLIM_INFINITY:
            limit = min(limit, hard)
        resource.setrlimit(which, (limit, limit))


def _cpu_budget(seconds: float) -> None:
    """Allow `seconds` (rounded up, plus one) more CPU time from now; past it the kernel ends the process."""
    import resource

    usage = resource.getrusage(resource.RUSAGE_SELF)
    soft = int(math.ceil(usage.ru_utime + usage.ru_stime + seconds)) + 1
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    if hard != resource.RLIM_INFINITY:
        soft = min(soft, hard)
    resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))


class Located:
    """Where an error happened, in the bundle's own files only: `reward.py line 12`."""

    def __init__(self, root: str, package: str) -> None:
        self.root = os.path.realpath(root) + os.sep
        self.package = package

    def own(self, filename: str | None) -> str | None:
        if not filename or not os.path.isabs(filename):  # `<frozen importlib._bootstrap>`, `<string>`
            return None
        path = os.path.realpath(filename)
        return path[len(self.root):] if path.startswith(self.root) else None

    def frames(self, error: BaseException) -> list[str]:
        import traceback

        frames = []
        for frame in traceback.extract_tb(error.__traceback__):
            name = self.own(frame.filename)
            if name:
                frames.append(f"{name} line {frame.lineno}, in {frame.name}"[:200])
        if isinstance(error, SyntaxError) and self.own(error.filename):
            frames.append(f"{self.own(error.filename)} line {error.lineno}"[:200])
        return frames[-MAX_FRAMES:]

    def text(self, error: BaseException, memory_limit_mb: int) -> str:
        if isinstance(error, MemoryError):
            message = f"MemoryError: ran out of memory (the limit is {memory_limit_mb} MiB)"
        else:
            detail = str(error.msg if isinstance(error, SyntaxError) else error)
            message = f"{type(error).__name__}: {detail}" if detail else type(error).__name__
        message = message.replace(f"{self.package}.", "").replace(self.package, "the bundle")
        if len(message) > MAX_TEXT:
            message = message[:MAX_TEXT - 3] + "..."
        frames = self.frames(error)
        if frames:
            message += f" ({frames[-1].split(', in ')[0][:200]})"
        return message


def _value(result: object) -> tuple[float | None, str | None]:
    import numbers

    if result is None:
        return None, None
    if isinstance(result, bool) or type(result).__name__ == "bool_":
        return float(bool(result)), None
    if isinstance(result, numbers.Real):
        value = float(result)
        if not math.isfinite(value):
            return None, f"returned {value}, not a finite number"
        return value, None
    return None, f"returned a {type(result).__name__}, not a number (or None)"


def _describe(function: object) -> str | None:
    """Why `function` cannot be called as fn(prompt_messages, completion_text, fields), or None."""
    import inspect

    if not callable(function):
        kind = type(function).__name__
        return f"is {'an' if kind[:1] in 'aeiou' else 'a'} {kind}, not a function"
    try:
        inspect.signature(function).bind(None, None, None)
    except TypeError as error:
        return f"cannot be called as fn(prompt_messages, completion_text, fields): {error}"
    except ValueError:
        return None  # a builtin without a signature: it will say so when called
    return None


def main(argv: list[str]) -> int:
    config = json.loads(argv[1])
    if config.get("user") is not None:
        _become(int(config["user"]))
    root, package = config["root"], config["package"]
    module_name, function_name = config["module"], config["function"]
    memory_limit_mb, time_limit_s = int(config["memoryLimitMb"]), float(config["timeLimitS"])

    # the protocol keeps private copies of stdin/stdout; the bundle's prints go to stderr, its reads see nothing
    proto_in = os.fdopen(os.dup(0), "rb")
    proto_out = os.fdopen(os.dup(1), "wb")
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(2, 1)

    def send(message: dict) -> None:
        proto_out.write(json.dumps(message).encode() + b"\n")
        proto_out.flush()

    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    sys.path.insert(0, root)
    isolation = _isolate_network() if config.get("isolate", True) else "in-process guard"
    _guard_sockets()
    _limit(memory_limit_mb, config.get("processLimit"), config.get("openFiles"), config.get("fileSizeMb"))
    import signal

    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the file size limit fails (EFBIG), no kill
    os.chdir(os.path.join(root, package))
    located = Located(os.path.join(root, package), package)

    import importlib

    _cpu_budget(float(config.get("startTimeoutS", 30.0)))
    try:
        module = importlib.import_module(f"{package}.{module_name}")
    except BaseException as error:  # noqa: BLE001 - any failure of the bundle's import is reported
        stage = "import"
        if isinstance(error, ModuleNotFoundError) and error.name in {f"{package}.{module_name}", package}:
            stage = "module"
        else:
            parts = module_name.split(".")
            prefixes = {f"{package}." + ".".join(parts[:i]) for i in range(1, len(parts) + 1)}
            if isinstance(error, ModuleNotFoundError) and error.name in prefixes:
                stage = "module"
        send({"ready": False, "stage": stage, "error": located.text(error, memory_limit_mb),
              "trace": located.frames(error)})
        return 0
    function = getattr(module, function_name, None)
    if function is None:
        names = sorted(n for n, v in vars(module).items() if callable(v) and not n.startswith("_")
                       and getattr(v, "__module__", None) == module.__name__)
        send({"ready": False, "stage": "function", "error": "", "defines": [n[:100] for n in names[:20]]})
        return 0
    problem = _describe(function)
    if problem:
        send({"ready": False, "stage": "signature", "error": problem})
        return 0
    send({"ready": True, "isolation": isolation})

    for line in proto_in:
        if not line.strip():
            continue
        request = json.loads(line)
        _cpu_budget(time_limit_s)
        try:
            result = function(request["prompt"], request["completion"], request["fields"])
            value, error = _value(result)
        except BaseException as exc:  # noqa: BLE001 - the function's failure is this sample's error
            if isinstance(exc, KeyboardInterrupt):
                raise
            if isinstance(exc, SystemExit):
                value, error = None, f"called exit({exc.code!r}) instead of returning a score"
            else:
                value, error = None, located.text(exc, memory_limit_mb)
        send({"value": value, "error": error})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
