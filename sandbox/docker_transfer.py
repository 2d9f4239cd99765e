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
import subprocess
from pathlib import Path

from dispatcher.errors import WorkspaceError
from sandbox.docker_container import WORKSPACE_PATH
from sandbox.docker_engine import translated
from sandbox.safe_tar import extract_safely, pack_directory
from sandbox.workspace import remove_tree

# Re-owning a tree of a million files takes a few seconds; this is far beyond.
HAND_OVER_TIMEOUT_S = 600
# --no-cleanup on a remote engine copies back at most the larger of these.
COPY_BACK_MIN_BYTES = 1 << 30
COPY_BACK_GROWTH = 2


def hand_over(root: Path, uid: int, gid: int) -> None:
    """Give every entry below and including `root` to uid:gid; links are
    re-owned themselves, never their targets.

    coreutils' `chown -R -P -h` walks by directory descriptor (fts), so a
    directory swapped for a link mid-walk is not followed, and it has no
    depth limit (os.walk recurses, and a hostile tree can be deeper than
    Python's recursion limit).
    """
    try:
        completed = subprocess.run(["chown", "-R", "-P", "-h", f"{uid}:{gid}", "--", str(root)],
                                   stdin=subprocess.DEVNULL, capture_output=True, check=False,
                                   timeout=HAND_OVER_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise WorkspaceError(f"cannot hand the workspace to the sandbox user: {exc}") from exc
    if completed.returncode != 0:
        problem = completed.stderr.decode("utf-8", "replace").strip().splitlines()[:1] or ["chown failed"]
        raise WorkspaceError(f"cannot hand the workspace to the sandbox user: {problem[0]}")


def copy_in(container, root: Path, uid: int, gid: int) -> int:
    """Copy the host tree at `root` into the container's /workspace; returns
    the archive's size in bytes."""
    with pack_directory(root, uid=uid, gid=gid) as archive:
        size = os.fstat(archive.fileno()).st_size
        with translated("copy the workspace into the sandbox container"):
            container.put_archive(WORKSPACE_PATH, archive)
    return size


def copy_back_limit(copied_in_bytes: int) -> int:
    """The most `copy_out` writes to the host for a workspace that went in at
    `copied_in_bytes`: room for checkouts of other commits, none for a
    command that filled the container's disk (or made a huge sparse file)."""
    return max(COPY_BACK_MIN_BYTES, COPY_BACK_GROWTH * copied_in_bytes)


def copy_out(container, root: Path, max_bytes: int) -> list[str]:
    """Replace the host tree at `root` with the container's /workspace, writing
    at most `max_bytes` of files; returns the entries refused (links, devices,
    odd names, files past the limit) as "name: reason"."""
    from sandbox.safe_tar import StreamReader

    with translated("copy the workspace out of the sandbox container"):
        chunks, _ = container.get_archive(WORKSPACE_PATH)
        # Start from an empty directory: the extractor then never meets a link
        # it did not make, and it makes none.
        _empty(root)
        return extract_safely(StreamReader(chunks), root, strip_components=1, max_bytes=max_bytes)


def _empty(root: Path) -> None:
    with os.scandir(root) as listing:
        for entry in listing:
            if entry.is_dir(follow_symlinks=False):
                if not remove_tree(entry.path):
                    raise OSError(f"cannot remove {entry.path}")
            else:
                os.unlink(entry.path)
