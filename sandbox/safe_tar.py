"""Tar archives across the host/container boundary, without following links.

`pack_directory` archives a host workspace for `put_archive`: symlinks are
stored as links (they resolve inside the container, never here) and every
file is opened with O_NOFOLLOW. `extract_safely` unpacks what comes back from
a container, which may have been shaped by a hostile repository or model: it
writes only plain files and directories, refuses links, devices, absolute
names and '..' components, and drops setuid bits. Since it never creates a
link, nothing it writes later can be redirected through one.
"""

from __future__ import annotations

import io
import os
import stat
import tarfile
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import BinaryIO

_COPY_CHUNK_BYTES = 1 << 20
# Permission bits we keep: no setuid, setgid or sticky from an archive.
_MODE_BITS = 0o777


def refusal(member: tarfile.TarInfo) -> str | None:
    """Why `member` must not be extracted, or None when it is a plain file or directory."""
    name = member.name
    if name.startswith("/") or (len(name) > 1 and name[1] == ":"):
        return "has an absolute name"
    if ".." in name.split("/"):
        return "has a '..' component"
    if member.issym() or member.islnk():
        return "is a link"
    if not (member.isfile() or member.isdir()):
        return "is not a regular file or directory"
    return None


def extract_safely(archive: BinaryIO, dest: Path, strip_components: int = 0,
                   max_bytes: int | None = None) -> list[str]:
    """Extract the plain files and directories of a tar stream under `dest`.

    `dest` should be empty. Names lose their first `strip_components`
    components. Files that would take the total written past `max_bytes` are
    refused (a sparse file of a terabyte is a few bytes in a container, and
    all of it here). Returns "name: reason" for every member that was refused.
    """
    dest_real = os.path.realpath(dest)
    refused = []
    written = 0
    with tarfile.open(fileobj=archive, mode="r|*") as tar:
        for member in tar:
            # Judged by the name as archived, before any component is stripped.
            why = refusal(member)
            shown = member.name
            member.name = _strip(member.name, strip_components)
            if why is None and not member.name:
                continue  # the archived top directory itself
            if why is None and not _lands_inside(dest_real, member.name):
                why = "would land outside the destination"
            if why is not None:
                refused.append(f"{shown}: {why}")
                continue
            target = os.path.join(dest_real, member.name)
            if member.isdir():
                os.makedirs(target, mode=0o755, exist_ok=True)
                os.chmod(target, (member.mode & _MODE_BITS) | 0o700)
                continue
            if max_bytes is not None and written + member.size > max_bytes:
                refused.append(f"{shown}: would take what is copied back past {max_bytes:,} bytes")
                continue
            written += member.size
            os.makedirs(os.path.dirname(target), mode=0o755, exist_ok=True)
            source = tar.extractfile(member)
            # O_EXCL|O_NOFOLLOW: never write through something already there.
            try:
                fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                             (member.mode & _MODE_BITS) | 0o600)
            except FileExistsError:
                refused.append(f"{shown}: appears twice")
                continue
            with os.fdopen(fd, "wb") as handle:
                while chunk := source.read(_COPY_CHUNK_BYTES):
                    handle.write(chunk)
    return refused


def pack_directory(root: Path, *, uid: int, gid: int) -> BinaryIO:
    """A tar of everything below `root` (not `root` itself), owned by uid:gid,
    in a temporary file rewound to its start. Links are stored, never followed;
    FIFOs, sockets and devices are left out."""
    spool = tempfile.TemporaryFile()
    with tarfile.open(fileobj=spool, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path, name, info in _tree(root):
            member = tarfile.TarInfo(name)
            member.uid, member.gid = uid, gid
            member.mode = info.st_mode & _MODE_BITS
            member.mtime = int(info.st_mtime)
            if stat.S_ISDIR(info.st_mode):
                member.type = tarfile.DIRTYPE
                tar.addfile(member)
            elif stat.S_ISLNK(info.st_mode):
                member.type = tarfile.SYMTYPE
                member.linkname = os.readlink(path)
                tar.addfile(member)
            elif stat.S_ISREG(info.st_mode):
                _add_file(tar, member, path)
    spool.seek(0)
    return spool


def _tree(root: Path) -> Iterable[tuple[str, str, os.stat_result]]:
    """(host path, archive name, lstat) for every entry below `root`, parents first."""
    stack = [("", os.fspath(root))]
    while stack:
        prefix, directory = stack.pop()
        with os.scandir(directory) as listing:
            entries = sorted(listing, key=lambda entry: entry.name)
        for entry in entries:
            info = entry.stat(follow_symlinks=False)
            name = prefix + entry.name
            yield entry.path, name, info
            if stat.S_ISDIR(info.st_mode):
                stack.append((name + "/", entry.path))


def _add_file(tar: tarfile.TarFile, member: tarfile.TarInfo, path: str) -> None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return  # replaced by a link or removed since the listing: leave it out
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            return
        member.size = info.st_size
        tar.addfile(member, _Exactly(handle, info.st_size))


class _Exactly(io.RawIOBase):
    """At most `size` bytes of `handle`, zero-padded if the file shrank meanwhile,
    so the archive always matches the size its header promised."""

    def __init__(self, handle: BinaryIO, size: int) -> None:
        self._handle, self._left = handle, size

    def readable(self) -> bool:
        return True

    def read(self, count: int = -1) -> bytes:
        if count < 0 or count > self._left:
            count = self._left
        data = self._handle.read(count)
        if len(data) < count:
            data += b"\0" * (count - len(data))
        self._left -= len(data)
        return data


def _strip(name: str, components: int) -> str:
    """`name` without its first `components` components ('' when nothing is left).
    Only called on names `refusal` accepted, so never on an absolute one."""
    parts = [part for part in name.split("/") if part not in ("", ".")]
    return "/".join(parts[components:])


def _lands_inside(dest_real: str, name: str) -> bool:
    target = os.path.normpath(os.path.join(dest_real, name))
    return target.startswith(dest_real + os.sep)


class StreamReader(io.RawIOBase):
    """A readable file over an iterator of byte chunks (the SDK's archive stream)."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self._chunks = iter(chunks)
        self._pending = b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        while not self._pending:
            self._pending = next(self._chunks, None)
            if self._pending is None:
                self._pending = b""
                return 0
        count = min(len(buffer), len(self._pending))
        buffer[:count] = self._pending[:count]
        self._pending = self._pending[count:]
        return count
