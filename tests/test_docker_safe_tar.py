"""The tar code that moves workspaces across the container boundary never follows or makes a link."""

import io
import os
import tarfile

import pytest

from sandbox.safe_tar import extract_safely, pack_directory, refusal


def _archive(*members):
    """A tar stream of (TarInfo, bytes | None) pairs."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for member, data in members:
            if data is not None:
                member.size = len(data)
                tar.addfile(member, io.BytesIO(data))
            else:
                tar.addfile(member)
    buffer.seek(0)
    return buffer


def _member(name, kind=tarfile.REGTYPE, linkname=""):
    member = tarfile.TarInfo(name)
    member.type = kind
    member.linkname = linkname
    member.mode = 0o644
    return member


@pytest.mark.parametrize(("member", "reason"), [
    (_member("workspace/link", tarfile.SYMTYPE, "/etc/passwd"), "is a link"),
    (_member("workspace/hard", tarfile.LNKTYPE, "/etc/shadow"), "is a link"),
    (_member("/etc/cron.d/evil"), "has an absolute name"),
    (_member("workspace/../../etc/evil"), "has a '..' component"),
    (_member("../evil"), "has a '..' component"),
    (_member("workspace/dev", tarfile.CHRTYPE), "is not a regular file or directory"),
    (_member("workspace/fifo", tarfile.FIFOTYPE), "is not a regular file or directory"),
])
def test_filter_refuses_links_absolute_and_climbing_names(member, reason):
    """Links, absolute names, '..' components and devices are refused, each with its reason."""
    assert refusal(member) == reason


def test_plain_files_and_directories_pass_the_filter():
    """Ordinary files and directories are accepted."""
    assert refusal(_member("workspace/src/main.c")) is None
    assert refusal(_member("workspace/src", tarfile.DIRTYPE)) is None


def test_extraction_writes_nothing_outside_and_no_links(tmp_path):
    """A hostile archive yields its plain files under the destination and nothing else anywhere."""
    dest = tmp_path / "dest"
    dest.mkdir()
    outside = tmp_path / "outside.txt"
    setuid = _member("workspace/tool")
    setuid.mode = 0o4755
    archive = _archive(
        (_member("workspace", tarfile.DIRTYPE), None),
        (_member("workspace/ok.txt"), b"fine"),
        (_member("workspace/escape", tarfile.SYMTYPE, str(tmp_path)), None),
        (_member("workspace/escape/outside.txt"), b"through the link"),
        (_member("workspace/../outside.txt"), b"climbed"),
        (_member(str(outside)), b"absolute"),
        (setuid, b"#!/bin/sh\n"),
    )
    refused = extract_safely(archive, dest, strip_components=1)
    assert (dest / "ok.txt").read_bytes() == b"fine"
    assert not outside.exists()
    assert not any(os.path.islink(os.path.join(root, name))
                   for root, dirs, files in os.walk(dest) for name in dirs + files)
    assert (dest / "tool").stat().st_mode & 0o7000 == 0
    assert len(refused) == 3
    # The link was refused, so "escape/outside.txt" became a plain file in a real directory.
    assert (dest / "escape" / "outside.txt").read_bytes() == b"through the link"


def test_packing_stores_links_without_following_them(tmp_path):
    """pack_directory archives a link as a link and never reads the file it points to."""
    secret = tmp_path / "secret.txt"
    secret.write_text("host secret")
    root = tmp_path / "workspace"
    (root / "src").mkdir(parents=True)
    (root / "src" / "a.txt").write_text("a")
    os.symlink(str(secret), root / "link")
    os.symlink(str(tmp_path), root / "dir-link")
    os.mkfifo(root / "fifo")
    with pack_directory(root, uid=10001, gid=10001) as archive:
        data = archive.read()
        archive.seek(0)
        with tarfile.open(fileobj=archive) as tar:
            members = {member.name: member for member in tar.getmembers()}
    assert b"host secret" not in data
    assert members["link"].issym() and members["link"].linkname == str(secret)
    assert members["dir-link"].issym()
    assert "fifo" not in members
    assert members["src/a.txt"].uid == 10001
    assert set(members) == {"src", "src/a.txt", "link", "dir-link"}
