"""Scoring bundles as ZIP archives: a directory packaged deterministically, and the rules an archive must meet.

Packaging (the client, `akka registry bundles register NS/NAME -f DIR`): every regular file under the directory,
hidden and cache files included, and every empty directory, as members named by their path relative to it (`/`
between parts), sorted by that path; each with the timestamp 1980-01-01 00:00, mode 0644 (files) or 0755
(directories), stored without compression, in an archive this module writes byte by byte (no extra fields, no
comment, UTF-8 names). So the same directory gives the same bytes, and the same digest, on every machine and Python
version, whatever its files' times, the order the filesystem lists them in, or the umask they were written under.
A symbolic link or a special file (FIFO, socket, device) is refused by its relative path: a bundle holds what it
names, never a pointer out of it.

Checking (the server, on the bytes as sent, which it keeps exactly): the bytes start like a ZIP archive and read as
one; every member is named by a relative path (no absolute path or drive, no `..` or `.` part, no empty part, no
backslash, no control character, none twice, none inside a member that is a file); no member is a symbolic link, a
special file or encrypted; every member uses stored or deflate compression and reads back matching its CRC; at most
`max_members` members and `max_uncompressed_bytes` once unpacked, in at most `max_archive_bytes`; and at least one
Python module (`.py`), since a scoring bundle holds the modules a grader or reward term loads. The code is never
imported or run here.
"""

from __future__ import annotations

import os
import stat
import struct
import zipfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from optimize.core.errors import Invalid, TooLarge

MIB = 1024 * 1024
FILE_MODE = 0o100644  # -rw-r--r--
DIRECTORY_MODE = 0o040755  # drwxr-xr-x
MAX_NAME_BYTES = 1024
ZIP_SIGNATURE = b"PK\x03\x04"
EMPTY_ZIP_SIGNATURE = b"PK\x05\x06"
_DOS_TIME, _DOS_DATE = 0, (0 << 9) | (1 << 5) | 1  # 1980-01-01 00:00:00, the earliest time a ZIP can hold
_VERSION = 20  # 2.0: what a stored member with a directory entry needs
_MADE_BY = (3 << 8) | _VERSION  # Unix, so readers take the modes from the external attributes
_UTF8_NAMES = 0x0800
_READ = 1024 * 1024
_ZIP_HINT = "register a ZIP archive of the bundle's files, or the bundle's directory (akka packages it)"
_PATH_HINT = "name every member by its path relative to the bundle's root, parts separated by '/'"
_MODULE_HINT = ("add the Python module that holds the scoring function (e.g. reward.py with compute_score); data "
                "files go beside it")


@dataclass(frozen=True, slots=True)
class BundleLimits:
    """The most a bundle may hold: members, bytes once unpacked, and bytes of the archive itself (room for the headers
    of a stored archive of the most members, with the longest names, on top of the most bytes unpacked: a directory
    within the first two limits always packages within the third)."""

    max_members: int = 10_000
    max_uncompressed_bytes: int = 64 * MIB
    max_archive_bytes: int = 96 * MIB

    def to_json(self) -> dict[str, int]:
        return {"maxMembers": self.max_members, "maxUncompressedBytes": self.max_uncompressed_bytes,
                "maxArchiveBytes": self.max_archive_bytes}


LIMITS = BundleLimits()


@dataclass(frozen=True, slots=True)
class Member:
    """One member of a bundle: a file (its size) or a directory (its path ends with `/`, size 0)."""

    path: str
    size: int

    @property
    def is_directory(self) -> bool:
        return self.path.endswith("/")

    def to_json(self) -> dict[str, object]:
        return {"path": self.path, "bytes": self.size}


@dataclass(frozen=True, slots=True)
class BundleSummary:
    """What a checked archive holds, in the archive's order."""

    members: list[Member] = field(default_factory=list)

    @property
    def files(self) -> list[Member]:
        return [m for m in self.members if not m.is_directory]

    @property
    def directories(self) -> list[Member]:
        return [m for m in self.members if m.is_directory]

    @property
    def modules(self) -> list[str]:
        return sorted(m.path for m in self.files if m.path.endswith(".py"))

    @property
    def uncompressed_bytes(self) -> int:
        return sum(m.size for m in self.members)


# --- names ------------------------------------------------------------------------------------------------------


def _shown(name: str) -> str:
    """A member's name as a message quotes it (controls and odd characters escaped)."""
    return repr(name)


def name_problem(name: str) -> str | None:
    """What is wrong with a member name (a directory's ends with `/`), or None when it is a relative path."""
    try:
        encoded = name.encode("utf-8")
    except UnicodeEncodeError:
        return "is not valid UTF-8"
    if not name or name == "/":
        return "has an empty name"
    if len(encoded) > MAX_NAME_BYTES:
        return f"is a path longer than {MAX_NAME_BYTES} bytes"
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in name):
        return "holds a control character"
    if "\\" in name:
        return "holds a backslash"
    if name.startswith("/") or (len(name) >= 2 and name[1] == ":" and name[0].isalpha()):
        return "is an absolute path"
    parts = (name[:-1] if name.endswith("/") else name).split("/")
    if ".." in parts:
        return "climbs out of the bundle with '..'"
    if "." in parts or "" in parts:
        return "has an empty or '.' part"
    return None


def _detail(name: str) -> str:
    """A member's name as the refusal's `member` field holds it: as it is, or quoted when it is not UTF-8."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return _shown(name)
    return name


def _check_name(name: str, noun: str) -> None:
    problem = name_problem(name)
    if problem is not None:
        raise Invalid(f"{noun} {_shown(name)} {problem}", hint=_PATH_HINT, member=_detail(name))


# --- packaging a directory ----------------------------------------------------------------------------------------


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "a special file"


def directory_members(root: Path, limits: BundleLimits = LIMITS) -> list[tuple[Member, Path | None]]:
    """Every regular file and empty directory under `root`, sorted by relative path, with where each file is; a
    symbolic link or special file is refused by its relative path, and so is a directory over the limits."""
    if not root.is_dir():
        raise Invalid(f"{root} is not a directory", hint="name the bundle's directory or its ZIP file")
    found: list[tuple[Member, Path | None]] = []
    total = 0
    pending = [(root, "")]
    while pending:
        directory, prefix = pending.pop()
        try:
            entries = sorted(os.scandir(directory), key=lambda entry: entry.name)
        except OSError as error:
            raise Invalid(f"{prefix or '.'} cannot be read: {error.strerror}",
                          hint="make the bundle's files readable") from None
        if not entries and prefix:
            found.append((Member(prefix, 0), None))
        for entry in entries:
            relative = prefix + entry.name
            _check_name(relative, "file")
            try:
                status = entry.stat(follow_symlinks=False)
            except OSError as error:
                raise Invalid(f"{_shown(relative)} cannot be read: {error.strerror}",
                              hint="make the bundle's files readable", member=relative) from None
            mode = status.st_mode
            if stat.S_ISLNK(mode):
                raise Invalid(f"{_shown(relative)} is a symbolic link; a bundle holds only regular files and "
                              "directories", hint="replace the link with the file it points at, or remove it",
                              member=relative)
            if stat.S_ISDIR(mode):
                pending.append((Path(entry.path), relative + "/"))
                continue
            if not stat.S_ISREG(mode):
                raise Invalid(f"{_shown(relative)} is {_kind(mode)}; a bundle holds only regular files and "
                              "directories", hint="remove it from the bundle's directory", member=relative)
            size = status.st_size
            total += size
            found.append((Member(relative, size), Path(entry.path)))
        if len(found) > limits.max_members:
            raise TooLarge(f"the directory holds more than {limits.max_members:,} files and empty directories, the "
                           "most a bundle holds", hint="leave out what scoring does not read")
        if total > limits.max_uncompressed_bytes:
            raise TooLarge(f"the directory's files hold more than {limits.max_uncompressed_bytes:,} bytes, the most "
                           "a bundle holds", hint="leave out what scoring does not read")
    found.sort(key=lambda item: item[0].path)
    return found


def write_bundle(root: Path, target: BinaryIO, limits: BundleLimits = LIMITS) -> BundleSummary:
    """Package the directory `root` into `target` (see the module's description); returns what it holds."""
    central = bytearray()
    offset = 0
    members = []
    total = 0
    for member, path in directory_members(root, limits):
        data = b""
        if path is not None:
            try:
                with path.open("rb") as handle:  # as it is now: a file that grew since it was listed counts so
                    data = handle.read(limits.max_uncompressed_bytes - total + 1)
            except OSError as error:
                raise Invalid(f"{_shown(member.path)} cannot be read: {error.strerror}",
                              hint="make the bundle's files readable", member=member.path) from None
            total += len(data)
            if total > limits.max_uncompressed_bytes:
                raise TooLarge(f"the directory's files hold more than {limits.max_uncompressed_bytes:,} bytes, the "
                               "most a bundle holds", hint="leave out what scoring does not read")
        name = member.path.encode("utf-8")
        crc = zlib.crc32(data)
        mode = DIRECTORY_MODE if path is None else FILE_MODE
        header = struct.pack("<IHHHHHIIIHH", 0x04034B50, _VERSION, _UTF8_NAMES, zipfile.ZIP_STORED, _DOS_TIME,
                             _DOS_DATE, crc, len(data), len(data), len(name), 0)
        central += struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, _MADE_BY, _VERSION, _UTF8_NAMES,
                               zipfile.ZIP_STORED, _DOS_TIME, _DOS_DATE, crc, len(data), len(data), len(name), 0, 0,
                               0, 0, (mode << 16) | (0x10 if path is None else 0), offset) + name
        target.write(header + name)
        target.write(data)
        offset += len(header) + len(name) + len(data)
        members.append(Member(member.path, len(data)))
    target.write(bytes(central))
    target.write(struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, len(members), len(members), len(central), offset, 0))
    return BundleSummary(members)


def bundle_bytes(root: Path, limits: BundleLimits = LIMITS) -> bytes:
    """The packaged bytes of a directory (held in memory: at most the limits allow)."""
    import io

    buffer = io.BytesIO()
    write_bundle(root, buffer, limits)
    return buffer.getvalue()


# --- checking an archive ------------------------------------------------------------------------------------------


def check_archive(path: Path, limits: BundleLimits = LIMITS) -> BundleSummary:
    """Check the archive at `path` against the rules above; refusals name the member and what to change."""
    size = path.stat().st_size
    if size > limits.max_archive_bytes:
        raise TooLarge(f"the archive holds {size:,} bytes; a bundle's archive holds at most "
                       f"{limits.max_archive_bytes:,}", hint="leave out what scoring does not read")
    with path.open("rb") as handle:
        head = handle.read(4)
        if head == EMPTY_ZIP_SIGNATURE:
            raise Invalid("the ZIP archive holds no members; a scoring bundle holds Python modules",
                          hint=_MODULE_HINT)
        if head != ZIP_SIGNATURE:
            raise Invalid("the bundle is not a ZIP archive: its bytes do not start with a ZIP member's signature "
                          "(PK\\x03\\x04)", hint=_ZIP_HINT)
        handle.seek(0)
        try:
            archive = zipfile.ZipFile(handle)
        except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, OSError, EOFError, struct.error,
                UnicodeDecodeError, NotImplementedError) as error:
            raise Invalid(f"the bundle is not a readable ZIP archive: {error}", hint=_ZIP_HINT) from None
        with archive:
            infos = archive.infolist()
            if len(infos) > limits.max_members:
                raise TooLarge(f"the archive holds {len(infos):,} members; a bundle holds at most "
                               f"{limits.max_members:,}", hint="leave out what scoring does not read")
            members = [_check_member(info) for info in infos]
            _check_layout(members)
            declared = sum(m.size for m in members)
            if declared > limits.max_uncompressed_bytes:
                raise TooLarge(f"the archive's members hold {declared:,} bytes once unpacked; a bundle holds at most "
                               f"{limits.max_uncompressed_bytes:,}", hint="leave out what scoring does not read")
            for info, member in zip(infos, members, strict=True):
                if not member.is_directory:
                    _read_through(archive, info)
    summary = BundleSummary(members)
    if not summary.modules:
        raise Invalid("a scoring bundle holds Python modules; this archive holds no .py file", hint=_MODULE_HINT)
    return summary


def _check_member(info: zipfile.ZipInfo) -> Member:
    name = info.orig_filename  # as stored: ZipInfo.filename is cut at a NUL
    _check_name(name, "member")
    mode = info.external_attr >> 16
    kind = stat.S_IFMT(mode)
    if stat.S_ISLNK(mode):
        raise Invalid(f"member {_shown(name)} is a symbolic link; a bundle holds only regular files and directories",
                      hint="put the file itself in the archive", member=name)
    if kind not in (0, stat.S_IFREG, stat.S_IFDIR):
        raise Invalid(f"member {_shown(name)} is {_kind(mode)}; a bundle holds only regular files and directories",
                      hint="leave it out of the archive", member=name)
    if info.flag_bits & 0x1:
        raise Invalid(f"member {_shown(name)} is encrypted", hint="archive the bundle without a password",
                      member=name)
    directory = name.endswith("/")
    if (kind == stat.S_IFDIR or info.external_attr & 0x10) and not directory:
        raise Invalid(f"member {_shown(name)} is a directory whose name does not end with '/'", hint=_ZIP_HINT,
                      member=name)
    if directory and info.file_size:
        raise Invalid(f"member {_shown(name)} is a directory holding {info.file_size} bytes", hint=_ZIP_HINT,
                      member=name)
    if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        raise Invalid(f"member {_shown(name)} uses compression method {info.compress_type}; a bundle's members "
                      "are stored or deflated", hint="archive the bundle with deflate (every ZIP tool's default) "
                                                    "or without compression", member=name)
    return Member(name, info.file_size)


def _check_layout(members: list[Member]) -> None:
    """No member twice, and none inside a member that is a file."""
    seen: set[str] = set()
    files = {m.path for m in members if not m.is_directory}
    for member in members:
        key = member.path.rstrip("/")
        if key in seen:
            raise Invalid(f"member {_shown(member.path)} is in the archive twice", hint="keep one of them",
                          member=member.path)
        seen.add(key)
        parts = key.split("/")
        for depth in range(1, len(parts)):
            parent = "/".join(parts[:depth])
            if parent in files:
                raise Invalid(f"member {_shown(member.path)} is inside {_shown(parent)}, which is a file",
                              hint="rename one of them", member=member.path)


def _read_through(archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> None:
    """Read a member to its end (zipfile stops at its declared size and checks its CRC there)."""
    try:
        with archive.open(info) as stream:
            for _ in _chunks(stream):
                pass
    except (zipfile.BadZipFile, zlib.error, ValueError, OSError, EOFError, struct.error, NotImplementedError,
            RuntimeError, UnicodeDecodeError) as error:
        raise Invalid(f"member {_shown(info.orig_filename)} cannot be read: {error}", hint=_ZIP_HINT,
                      member=info.orig_filename) from None


def _chunks(stream: BinaryIO) -> Iterator[bytes]:
    while chunk := stream.read(_READ):
        yield chunk
