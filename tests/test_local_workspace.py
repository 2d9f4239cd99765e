"""LocalWorkspace itself: where it lives, what its commands see, how it ends."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from dispatcher.errors import ToolInputError
from sandbox.local import LocalWorkspace
from sandbox.workspace import Command

HOST_SECRETS = {
    "OPENAI_API_KEY": "sk-host-openai-secret",
    "ANTHROPIC_API_KEY": "sk-ant-host-secret",
    "AWS_SECRET_ACCESS_KEY": "aws-host-secret",
    "GITHUB_TOKEN": "ghp-host-secret",
}


@pytest.fixture
def workspace():
    ws = LocalWorkspace.open("repo")
    yield ws
    ws.close()


def test_workspace_is_a_research_mode_temp_dir_under_tmpdir(tmp_path, monkeypatch):
    """The directory is named research-<mode>-* and lives under $TMPDIR."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)  # make tempfile re-read TMPDIR
    ws = LocalWorkspace.open("web")
    try:
        assert ws.host_dir.parent == tmp_path and ws.host_dir.name.startswith("research-web-")
    finally:
        ws.close()


def test_close_removes_and_keep_keeps(tmp_path):
    """close() removes the tree (read-only files included); close(keep=True) leaves it."""
    removed = LocalWorkspace.open("repo")
    (removed.host_dir / "ro.txt").write_text("x")
    (removed.host_dir / "ro.txt").chmod(0o400)
    removed.close()
    assert not removed.host_dir.exists()
    kept = LocalWorkspace.open("repo")
    kept.close(keep=True)
    assert kept.host_dir.is_dir()
    kept.host_dir.rmdir()


def test_commands_see_no_host_secrets(workspace, monkeypatch):
    """API keys and tokens in the host environment never reach a tool subprocess."""
    for name, value in HOST_SECRETS.items():
        monkeypatch.setenv(name, value)
    env_dump = workspace.run(Command(["env"])).stdout.decode()
    for name, value in HOST_SECRETS.items():
        assert name not in env_dump and value not in env_dump
    assert "GIT_CONFIG_NOSYSTEM=1" in env_dump


def test_command_timeout_kills_the_whole_process_group(workspace):
    """A command past its timeout is killed with everything it spawned."""
    marker = workspace.host_dir / "survived"
    result = workspace.run(Command(["sh", "-c", f"(sleep 2; touch {marker}) & sleep 30"], timeout_s=0.5))
    assert result.timed_out
    # Had the background child survived the kill, it would create the marker at 2 s.
    workspace.run(Command(["sleep", "2.5"]))
    assert not marker.exists()


def test_command_output_is_capped(workspace):
    """stdout beyond max_output_bytes is dropped and reported as truncated."""
    result = workspace.run(Command(["head", "-c", "100000", "/dev/zero"], max_output_bytes=1000))
    assert len(result.stdout) == 1000 and result.truncated


def test_commands_run_in_a_contained_cwd(workspace):
    """cwd is resolved like any path: '..' is refused."""
    (workspace.host_dir / "sub").mkdir()
    assert workspace.run(Command(["pwd"], cwd="sub")).stdout.decode().strip().endswith("/sub")
    with pytest.raises(ToolInputError):
        workspace.run(Command(["pwd"], cwd=".."))


def test_reading_a_fifo_does_not_hang(workspace):
    """A FIFO planted in the tree is refused instead of blocking the read."""
    os.mkfifo(workspace.host_dir / "pipe")
    with pytest.raises(ToolInputError, match="not a regular file"):
        workspace.read_bytes("pipe", 100)


def test_write_bytes_stays_inside_and_refuses_symlinked_parents(workspace, tmp_path):
    """write_bytes creates parents inside the workspace and refuses a path through a link out."""
    assert workspace.write_bytes("pages/a.md", b"hi") == "pages/a.md"
    assert (workspace.host_dir / "pages" / "a.md").read_bytes() == b"hi"
    os.symlink(tmp_path, workspace.host_dir / "out")
    with pytest.raises(ToolInputError):
        workspace.write_bytes("out/x.md", b"escape")
    assert not (tmp_path / "x.md").exists()


def test_walk_skips_git_and_does_not_follow_links(workspace, tmp_path):
    """walk lists each directory then its subdirectories, without .git and without descending into links."""
    root = workspace.host_dir
    (root / ".git").mkdir()
    (root / ".git" / "config").write_text("")
    (root / "a").mkdir()
    (root / "a" / "b.txt").write_text("b")
    (tmp_path / "outside.txt").write_text("o")
    os.symlink(tmp_path, root / "link")
    walked = [(e.path, e.kind) for e in workspace.walk()]
    assert walked == [("a", "dir"), ("link", "symlink"), ("a/b.txt", "file")]


def test_resolve_refuses_every_escape(workspace):
    """'..', absolute paths, NUL bytes and the sibling prefix are refused; inside paths are canonical."""
    sibling = Path(str(workspace.host_dir) + "2")
    for bad in ("..", "../x", "/etc", "a\x00b", f"../{sibling.name}"):
        with pytest.raises(ToolInputError):
            workspace.resolve(bad)
    assert workspace.resolve("./a/../b") == "b"
    assert workspace.resolve("") == "."
