"""How the prepared workspace reaches the container, and how it comes back.

Bind mount (a local engine): the container sees the host directory itself. A
root host hands the tree to the sandbox uid so the non-root container user may
write it (`git checkout`), changing owners without following any link.

Copy (a remote engine, or `[sandbox] transfer = "copy"`): the tree is packed
without following links and unpacked into the container's /workspace volume by
the engine; `--no-cleanup` brings it back with the safe extractor.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from sandbox.docker_container import WORKSPACE_PATH
from sandbox.docker_engine import translated
from sandbox.safe_tar import extract_safely, pack_directory


def hand_over(root: Path, uid: int, gid: int) -> None:
    """Give every entry below and including `root` to uid:gid; links are
    re-owned themselves, never their targets."""
    os.chown(root, uid, gid, follow_symlinks=False)
    for directory, subdirectories, files in os.walk(root, followlinks=False):
        for name in (*subdirectories, *files):
            os.chown(os.path.join(directory, name), uid, gid, follow_symlinks=False)


def copy_in(container, root: Path, uid: int, gid: int) -> None:
    """Copy the host tree at `root` into the container's /workspace."""
    with pack_directory(root, uid=uid, gid=gid) as archive:
        with translated("copy the workspace into the sandbox container"):
            container.put_archive(WORKSPACE_PATH, archive)


def copy_out(container, root: Path) -> list[str]:
    """Replace the host tree at `root` with the container's /workspace; returns
    the entries refused (links, devices, odd names) as "name: reason"."""
    from sandbox.safe_tar import StreamReader

    with translated("copy the workspace out of the sandbox container"):
        chunks, _ = container.get_archive(WORKSPACE_PATH)
        # Start from an empty directory: the extractor then never meets a link
        # it did not make, and it makes none.
        _empty(root)
        return extract_safely(StreamReader(chunks), root, strip_components=1)


def _empty(root: Path) -> None:
    with os.scandir(root) as listing:
        for entry in listing:
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path)
            else:
                os.unlink(entry.path)
