"""Packaging a bundle's directory deterministically, and the rules an archive must meet (optimize.core.bundle_zip)."""

from __future__ import annotations

import hashlib
import io
import os
import socket
import stat
import zipfile
from pathlib import Path

import pytest

from optimize.core.bundle_zip import BundleLimits, bundle_bytes, check_archive
from optimize.core.errors import Invalid, TooLarge

FILES = {
    "reward.py": b"from . import helpers\n\ndef compute_score(answer, item):\n    return helpers.score(answer, item)\n",
    "helpers.py": b"def score(answer, item):\n    return 1.0\n",
    "tables/schema.json": b'{"fields": ["label"]}\n',
    ".env": b"STRICT=1\n",
    "__pycache__/helpers.cpython-311.pyc": b"\x00\x01cache",
    "deep/er/still/data.bin": bytes(range(256)),
}
EMPTY_DIRECTORIES = ("empty", "tables/unused")


def build(root: Path, order=None, mtime: int | None = None) -> Path:
    for name in order or FILES:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(FILES[name])
        if mtime is not None:
            os.utime(path, (mtime, mtime))
    for name in EMPTY_DIRECTORIES:
        (root / name).mkdir(parents=True, exist_ok=True)
    return root


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_the_same_directory_gives_the_same_bytes_whatever_times_order_and_umask(tmp_path):
    first = bundle_bytes(build(tmp_path / "a", mtime=1_600_000_000))
    assert bundle_bytes(tmp_path / "a") == first  # again
    previous = os.umask(0o077)
    try:
        other = build(tmp_path / "b", order=list(reversed(FILES)), mtime=1_700_000_000)
    finally:
        os.umask(previous)
    (other / "reward.py").chmod(0o700)
    (other / "tables").chmod(0o711)
    assert digest(bundle_bytes(other)) == digest(first)
    changed = build(tmp_path / "c")
    (changed / "helpers.py").write_bytes(b"def score(answer, item):\n    return 0.5\n")
    assert digest(bundle_bytes(changed)) != digest(first)


def test_every_file_and_empty_directory_is_a_member_sorted_with_fixed_times_and_modes(tmp_path):
    data = bundle_bytes(build(tmp_path / "a"))
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        infos = archive.infolist()
        names = [info.filename for info in infos]
        assert names == sorted([*FILES, *(f"{d}/" for d in EMPTY_DIRECTORIES)])
        assert ".env" in names and "__pycache__/helpers.cpython-311.pyc" in names and "empty/" in names
        assert "tables/" not in names  # a directory with members needs no entry of its own
        for info in infos:
            assert info.date_time == (1980, 1, 1, 0, 0, 0)
            assert info.compress_type == zipfile.ZIP_STORED
            mode = info.external_attr >> 16
            assert mode == (0o040755 if info.is_dir() else 0o100644), info.filename
            if not info.is_dir():
                assert archive.read(info) == FILES[info.filename]
        assert archive.testzip() is None
    path = tmp_path / "a.zip"
    path.write_bytes(data)
    summary = check_archive(path)
    assert summary.modules == ["helpers.py", "reward.py"] and len(summary.directories) == 2


def test_a_symlink_or_special_file_is_refused_by_its_relative_path(tmp_path):
    root = build(tmp_path / "a")
    (root / "tables" / "link.json").symlink_to(root / "tables" / "schema.json")
    with pytest.raises(Invalid, match="'tables/link.json' is a symbolic link") as refused:
        bundle_bytes(root)
    assert refused.value.details["member"] == "tables/link.json"
    (root / "tables" / "link.json").unlink()
    (root / "linked-dir").symlink_to(root / "deep", target_is_directory=True)
    with pytest.raises(Invalid, match="'linked-dir' is a symbolic link"):
        bundle_bytes(root)
    (root / "linked-dir").unlink()
    os.mkfifo(root / "deep" / "pipe")
    with pytest.raises(Invalid, match="'deep/pipe' is a FIFO"):
        bundle_bytes(root)
    (root / "deep" / "pipe").unlink()
    listener = socket.socket(socket.AF_UNIX)
    try:
        short = Path(f"/tmp/bz-{os.getpid()}")
        short.mkdir(exist_ok=True)
        (short / "reward.py").write_bytes(b"x = 1\n")
        listener.bind(str(short / "sock"))
        with pytest.raises(Invalid, match="'sock' is a socket"):
            bundle_bytes(short)
    finally:
        listener.close()
        for leftover in (short / "sock", short / "reward.py"):
            leftover.unlink(missing_ok=True)
        short.rmdir()


def test_a_name_that_is_not_utf8_or_holds_a_control_is_refused(tmp_path):
    root = build(tmp_path / "a")
    os.makedirs(os.fsencode(root / "bad"), exist_ok=True)
    open(os.fsencode(root / "bad") + b"/\xff.py", "wb").close()
    with pytest.raises(Invalid, match="is not valid UTF-8"):
        bundle_bytes(root)
    os.unlink(os.fsencode(root / "bad") + b"/\xff.py")
    (root / "bad" / "a\x01.py").write_bytes(b"")
    with pytest.raises(Invalid, match="holds a control character"):
        bundle_bytes(root)


def test_a_directory_over_the_limits_is_refused(tmp_path):
    root = build(tmp_path / "a")
    with pytest.raises(TooLarge, match="more than 3 files"):
        bundle_bytes(root, BundleLimits(max_members=3))
    with pytest.raises(TooLarge, match="more than 100 bytes"):
        bundle_bytes(root, BundleLimits(max_uncompressed_bytes=100))


# --- the archive rules ----------------------------------------------------------------------------------------


def archive(tmp_path: Path, entries: dict[str, bytes], modes: dict[str, int] | None = None,
            flags: dict[str, int] | None = None, compression: int = zipfile.ZIP_DEFLATED) -> Path:
    """A ZIP written by zipfile (as ZIP tools write them), with a member's Unix mode or flag bits where given."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as writer:
        for name, data in entries.items():
            info = zipfile.ZipInfo(name, date_time=(2024, 1, 1, 0, 0, 0))
            info.compress_type = compression
            info.external_attr = (modes or {}).get(name, 0o100644) << 16
            writer.writestr(info, data)
    data = bytearray(buffer.getvalue())
    for name, bits in (flags or {}).items():  # zipfile sets flags itself: patched into both headers of the member
        for signature, flag_at, name_at in ((b"PK\x03\x04", 6, 30), (b"PK\x01\x02", 8, 46)):
            header = data.find(signature)
            while data[header + name_at:header + name_at + len(name)] != name.encode():
                header = data.find(signature, header + 4)
            data[header + flag_at] |= bits
    path = tmp_path / f"a{len(list(tmp_path.iterdir()))}.zip"
    path.write_bytes(bytes(data))
    return path


MODULE = {"reward.py": b"x = 1\n"}


@pytest.mark.parametrize(("entries", "modes", "words"), [
    ({**MODULE, "../evil.py": b""}, None, "member '../evil.py' climbs out of the bundle with '..'"),
    ({**MODULE, "a/../../evil.py": b""}, None, "member 'a/../../evil.py' climbs out"),
    ({**MODULE, "/etc/passwd": b""}, None, "member '/etc/passwd' is an absolute path"),
    ({**MODULE, "C:/x.py": b""}, None, "member 'C:/x.py' is an absolute path"),
    ({**MODULE, "a\\b.py": b""}, None, "member 'a\\\\b.py' holds a backslash"),
    ({**MODULE, "./x.py": b""}, None, "member './x.py' has an empty or '.' part"),
    ({**MODULE, "a//x.py": b""}, None, "member 'a//x.py' has an empty or '.' part"),
    ({**MODULE, "link": b"reward.py"}, {"link": 0o120777}, "member 'link' is a symbolic link"),
    ({**MODULE, "dev": b""}, {"dev": 0o020644}, "member 'dev' is a device"),
    ({**MODULE, "reward.py/inner.txt": b""}, None, "member 'reward.py/inner.txt' is inside 'reward.py', which is a"),
    ({"data.csv": b"a\n", "docs/": b""}, None, "a scoring bundle holds Python modules"),
], ids=["dotdot", "dotdot-inside", "absolute", "drive", "backslash", "dot", "empty-part", "symlink", "device",
        "inside-a-file", "no-module"])
def test_an_archive_breaking_a_rule_is_refused_naming_the_member(tmp_path, entries, modes, words):
    with pytest.raises(Invalid) as refused:
        check_archive(archive(tmp_path, entries, modes))
    assert words in refused.value.message, refused.value.message


def test_not_a_zip_empty_zip_encrypted_and_corrupt_members_are_refused(tmp_path):
    text = tmp_path / "reward.py"
    text.write_bytes(b"x = 1\n")
    with pytest.raises(Invalid, match="the bundle is not a ZIP archive"):
        check_archive(text)
    empty = tmp_path / "empty.zip"
    with zipfile.ZipFile(empty, "w"):
        pass
    with pytest.raises(Invalid, match="holds no members; a scoring bundle holds Python modules"):
        check_archive(empty)
    cut = tmp_path / "cut.zip"
    cut.write_bytes(archive(tmp_path, MODULE).read_bytes()[:40])
    with pytest.raises(Invalid, match="not a readable ZIP archive"):
        check_archive(cut)
    with pytest.raises(Invalid, match="member 'reward.py' is encrypted"):
        check_archive(archive(tmp_path, MODULE, flags={"reward.py": 0x1}))
    stored = archive(tmp_path, MODULE, compression=zipfile.ZIP_STORED)
    data = stored.read_bytes().replace(b"x = 1\n", b"x = 2\n")  # the CRC no longer matches
    stored.write_bytes(data)
    with pytest.raises(Invalid, match="member 'reward.py' cannot be read"):
        check_archive(stored)
    with pytest.raises(Invalid, match="uses compression method 12"):
        check_archive(archive(tmp_path, MODULE, compression=zipfile.ZIP_BZIP2))


def test_duplicates_and_limits(tmp_path):
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as writer, pytest.warns(UserWarning):
        writer.writestr("reward.py", b"x = 1\n")
        writer.writestr("reward.py", b"x = 2\n")
    twice = tmp_path / "twice.zip"
    twice.write_bytes(buffer.getvalue())
    with pytest.raises(Invalid, match="member 'reward.py' is in the archive twice"):
        check_archive(twice)
    many = archive(tmp_path, {**MODULE, **{f"d/{i}.txt": b"" for i in range(5)}})
    with pytest.raises(TooLarge, match="holds 6 members; a bundle holds at most 5"):
        check_archive(many, BundleLimits(max_members=5))
    big = archive(tmp_path, {**MODULE, "zeros.bin": bytes(10_000)})
    with pytest.raises(TooLarge, match="10,006 bytes once unpacked; a bundle holds at most 1,000"):
        check_archive(big, BundleLimits(max_uncompressed_bytes=1000))
    with pytest.raises(TooLarge, match="a bundle's archive holds at most 100"):
        check_archive(big, BundleLimits(max_archive_bytes=100))
    assert check_archive(big).modules == ["reward.py"]


def test_a_nul_in_a_member_name_is_refused_not_cut(tmp_path):
    path = archive(tmp_path, {**MODULE, "evilX.py": b""})
    path.write_bytes(path.read_bytes().replace(b"evilX.py", b"evil\x00.py"))
    with pytest.raises(Invalid, match="holds a control character"):
        check_archive(path)


def test_modes_of_a_packaged_member_are_normalised(tmp_path):
    root = build(tmp_path / "a")
    (root / "reward.py").chmod(stat.S_IRWXU)
    with zipfile.ZipFile(io.BytesIO(bundle_bytes(root))) as packaged:
        assert packaged.getinfo("reward.py").external_attr >> 16 == 0o100644
