"""LocalWorkspace itself: where it lives, what it lets a caller reach, what its
commands see, and how it ends. Real files, real processes."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest

from dispatcher.errors import ToolInputError, WorkspaceError
from sandbox.local import DRAIN_S, LocalWorkspace
from sandbox.workspace import Command, Entry
from tests.support.workspaces import make_deep_tree, private_tmpdir, workspace  # noqa: F401

HOST_SECRETS = {
    "OPENAI_API_KEY": "sk-host-openai-secret",
    "ANTHROPIC_API_KEY": "sk-ant-host-secret",
    "AWS_SECRET_ACCESS_KEY": "aws-host-secret",
    "GITHUB_TOKEN": "ghp-host-secret",
}
# How long a test waits for something that should happen at once before calling it hung.
HANG_GUARD_S = 20


@pytest.fixture
def outside(tmp_path) -> Path:
    """A directory beside the workspace holding a canary file."""
    directory = tmp_path / "outside"
    directory.mkdir()
    (directory / "canary.txt").write_text("CANARY outside\n")
    return directory


# -- where it lives and how it ends ------------------------------------------------------------
def test_workspace_is_a_research_mode_temp_dir_under_tmpdir(private_tmpdir):
    """The directory is named research-<mode>-* and lives under $TMPDIR."""
    opened = LocalWorkspace.open("web")
    try:
        assert opened.host_dir.parent == private_tmpdir and opened.host_dir.name.startswith("research-web-")
        assert opened.mode == "web"
    finally:
        opened.close()


def test_close_removes_the_tree_and_is_safe_twice(workspace):
    """close() removes everything, read-only files included, and a second close is harmless."""
    (workspace.host_dir / "sub").mkdir()
    (workspace.host_dir / "sub" / "ro.txt").write_text("x")
    (workspace.host_dir / "sub" / "ro.txt").chmod(0o400)
    workspace.close()
    assert not workspace.host_dir.exists()
    workspace.close()


def test_a_tree_deeper_than_pythons_recursion_limit_is_removed(workspace):
    """A hostile repository deeper than Python's recursion limit (shutil.rmtree recurses per level) is still removed."""
    make_deep_tree(workspace.host_dir)
    workspace.close()
    assert not workspace.host_dir.exists()


def test_a_write_after_close_does_not_bring_the_workspace_back(workspace):
    """A tool call still running when the run ends cannot recreate the removed workspace by writing."""
    workspace.close()
    with pytest.raises(WorkspaceError, match="the workspace is closed"):
        workspace.write_bytes("pages/late.md", b"late")
    assert not workspace.host_dir.exists()


def test_close_with_keep_leaves_the_tree(private_tmpdir):
    """close(keep=True) leaves the files for the user and says where."""
    kept = LocalWorkspace.open("repo")
    (kept.host_dir / "notes.md").write_text("kept")
    kept.close(keep=True)
    assert (kept.host_dir / "notes.md").read_text() == "kept"
    assert kept.kept_message() == f"workspace kept at {kept.host_dir}"


# -- paths ------------------------------------------------------------------------------------
def test_resolve_gives_canonical_paths_inside(workspace):
    """Inside paths come back canonical, following links that stay inside; missing paths are fine."""
    (workspace.host_dir / "a").mkdir()
    (workspace.host_dir / "a" / "f.txt").write_text("f")
    os.symlink("a/f.txt", workspace.host_dir / "link")
    assert workspace.resolve("./a/../a/f.txt") == "a/f.txt"
    assert workspace.resolve("link") == "a/f.txt"
    assert workspace.resolve("") == "." and workspace.resolve(".") == "."
    assert workspace.resolve("not/yet/there.md") == "not/yet/there.md"


def test_resolve_refuses_every_escape(workspace, outside):
    """'..', absolute paths, NUL bytes, links out and the sibling prefix are all refused."""
    os.symlink(outside, workspace.host_dir / "outdir")
    os.symlink(outside / "canary.txt", workspace.host_dir / "leak")
    sibling = f"../{workspace.host_dir.name}2"
    for bad in ("..", "../x", "a/../../x", "/etc", "/", "a\x00b", "outdir", "outdir/canary.txt", "leak",
                sibling, f"{sibling}/secret", "missing/../../etc", "\udcff"):
        with pytest.raises(ToolInputError):
            workspace.resolve(bad)


def test_read_bytes_reads_a_window_and_reports_the_size(workspace):
    """read_bytes returns at most max_bytes from offset, the file's size, and whether more follows."""
    (workspace.host_dir / "f.txt").write_bytes(b"0123456789")
    window = workspace.read_bytes("f.txt", 4, offset=3)
    assert (window.data, window.size, window.truncated) == (b"3456", 10, True)
    tail = workspace.read_bytes("f.txt", 100, offset=6)
    assert (tail.data, tail.truncated) == (b"6789", False)


def test_read_bytes_refuses_links_out_directories_and_missing_files(workspace, outside):
    """A link out, a directory and a missing file are each refused with a reason."""
    os.symlink(outside / "canary.txt", workspace.host_dir / "leak")
    os.symlink(outside, workspace.host_dir / "outdir")
    (workspace.host_dir / "dir").mkdir()
    with pytest.raises(ToolInputError, match="outside the workspace"):
        workspace.read_bytes("leak", 100)
    with pytest.raises(ToolInputError, match="outside the workspace"):
        workspace.read_bytes("outdir/canary.txt", 100)
    with pytest.raises(ToolInputError, match="is a directory"):
        workspace.read_bytes("dir", 100)
    with pytest.raises(ToolInputError, match="does not exist"):
        workspace.read_bytes("nope", 100)


def test_reading_a_fifo_is_refused_without_hanging(workspace):
    """A FIFO planted in the tree is refused at once instead of blocking for a writer."""
    os.mkfifo(workspace.host_dir / "pipe")
    outcome: list[BaseException] = []

    def read() -> None:
        try:
            workspace.read_bytes("pipe", 100)
        except ToolInputError as exc:
            outcome.append(exc)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(HANG_GUARD_S)
    assert not reader.is_alive(), "read_bytes blocked on a FIFO"
    assert "not a regular file" in str(outcome[0])


def test_list_dir_reports_kinds_and_sizes_without_following_links(workspace, outside):
    """list_dir gives each child's kind and size, sorted, and reports links as links."""
    root = workspace.host_dir
    (root / "b.txt").write_text("bbb")
    (root / "a").mkdir()
    os.symlink(outside, root / "outdir")
    os.mkfifo(root / "pipe")
    assert workspace.list_dir(".") == [
        Entry("a", "dir", 0), Entry("b.txt", "file", 3), Entry("outdir", "symlink", 0), Entry("pipe", "other", 0)]
    with pytest.raises(ToolInputError, match="outside the workspace"):
        workspace.list_dir("outdir")
    with pytest.raises(ToolInputError, match="is not a directory"):
        workspace.list_dir("b.txt")


def test_walk_skips_git_and_does_not_follow_links(workspace, outside):
    """walk lists a directory, then its subdirectories, without .git and without descending into links."""
    root = workspace.host_dir
    (root / ".git").mkdir()
    (root / ".git" / "config").write_text("")
    (root / "a" / "deep").mkdir(parents=True)
    (root / "a" / "b.txt").write_text("b")
    (root / "a" / "deep" / "c.txt").write_text("c")
    (root / "z.txt").write_text("z")
    os.symlink(outside, root / "link")
    walked = [(e.path, e.kind) for e in workspace.walk()]
    assert walked == [("a", "dir"), ("link", "symlink"), ("z.txt", "file"),
                      ("a/b.txt", "file"), ("a/deep", "dir"), ("a/deep/c.txt", "file")]
    assert [e.path for e in workspace.walk("a/deep")] == ["a/deep/c.txt"]
    with pytest.raises(ToolInputError, match="outside the workspace"):
        list(workspace.walk("link"))


def test_write_bytes_creates_parents_and_returns_the_canonical_path(workspace):
    """write_bytes makes missing directories and replaces an existing file."""
    assert workspace.write_bytes("pages/new/a.md", b"one") == "pages/new/a.md"
    assert workspace.write_bytes("./pages/new/../new/a.md", b"two") == "pages/new/a.md"
    assert (workspace.host_dir / "pages" / "new" / "a.md").read_bytes() == b"two"


def test_write_bytes_never_writes_outside(workspace, outside):
    """Writes through a linked directory, a dangling link out, '..' or an absolute path are refused."""
    os.symlink(outside, workspace.host_dir / "outdir")
    os.symlink(outside / "planted.md", workspace.host_dir / "dangling")
    before = sorted(p.name for p in outside.iterdir())
    for bad in ("outdir/x.md", "outdir/sub/x.md", "dangling", "../x.md", f"{outside}/x.md"):
        with pytest.raises(ToolInputError):
            workspace.write_bytes(bad, b"escape")
    assert sorted(p.name for p in outside.iterdir()) == before


# -- programs ---------------------------------------------------------------------------------
def test_commands_see_no_host_secrets(workspace, monkeypatch):
    """API keys and tokens in the host environment never reach a tool subprocess."""
    for name, value in HOST_SECRETS.items():
        monkeypatch.setenv(name, value)
    env_dump = workspace.run(Command(["env"])).stdout.decode()
    for name, value in HOST_SECRETS.items():
        assert name not in env_dump and value not in env_dump
    assert "GIT_CONFIG_NOSYSTEM=1" in env_dump and "HOME=/nonexistent" in env_dump


def test_commands_run_in_a_contained_cwd(workspace, outside):
    """cwd is resolved like any path: a subdirectory works, '..' and links out are refused."""
    (workspace.host_dir / "sub").mkdir()
    os.symlink(outside, workspace.host_dir / "outdir")
    result = workspace.run(Command(["pwd"], cwd="sub"))
    assert result.exit_code == 0 and result.stdout.decode().strip() == os.path.realpath(workspace.host_dir / "sub")
    for bad in ("..", "outdir", "/tmp"):
        with pytest.raises(ToolInputError):
            workspace.run(Command(["pwd"], cwd=bad))


def test_ripgrep_is_on_the_tool_path(workspace):
    """The `rg` from the ripgrep wheel is found by commands without any host PATH."""
    result = workspace.run(Command(["rg", "--version"]))
    assert result.exit_code == 0 and result.stdout.startswith(b"ripgrep ")


def test_missing_program_is_a_workspace_error(workspace):
    """A program that is not installed is a WorkspaceError naming it."""
    with pytest.raises(WorkspaceError, match="no-such-program-here is not installed"):
        workspace.run(Command(["no-such-program-here"]))


def test_exit_code_and_stderr_come_back(workspace):
    """A failing command reports its exit code and stderr, and run does not raise."""
    result = workspace.run(Command(["sh", "-c", "echo oops >&2; exit 3"]))
    assert (result.exit_code, result.stderr, result.timed_out) == (3, b"oops\n", False)


def test_command_output_is_capped(workspace):
    """stdout beyond max_output_bytes is dropped and reported as truncated."""
    result = workspace.run(Command(["head", "-c", "100000", "/dev/zero"], max_output_bytes=1000))
    assert len(result.stdout) == 1000 and result.truncated
    whole = workspace.run(Command(["head", "-c", "1000", "/dev/zero"], max_output_bytes=1000))
    assert len(whole.stdout) == 1000 and not whole.truncated


def test_command_timeout_kills_the_whole_process_group(workspace):
    """A command past its timeout is killed together with the children it started."""
    result = workspace.run(Command(["sh", "-c", "sleep 300 & echo $! > child.pid; wait"], timeout_s=3.0))
    assert result.timed_out
    child = int((workspace.host_dir / "child.pid").read_text())
    assert _ends_within(child, HANG_GUARD_S), "the background child outlived the timeout"


def test_what_a_command_leaves_running_dies_with_it(workspace):
    """A background child does not outlive its command: it is killed when the command exits."""
    result = workspace.run(Command(["sh", "-c", "sleep 300 & echo $! > child.pid; echo started"], timeout_s=20))
    assert (result.exit_code, result.stdout, result.timed_out) == (0, b"started\n", False)
    child = int((workspace.host_dir / "child.pid").read_text())
    assert _ends_within(child, HANG_GUARD_S), "the background child outlived its command"


def test_a_child_that_leaves_the_group_cannot_hold_the_call_open(workspace):
    """A child that escapes the process group (setsid) keeping the output open ends the call
    DRAIN_S after its command, with what arrived, instead of when the child ends."""
    started = time.monotonic()
    result = workspace.run(Command(["sh", "-c", "setsid sleep 60 & echo $! > escaped.pid; echo hi"], timeout_s=30))
    try:
        assert (result.exit_code, result.stdout) == (0, b"hi\n")
        assert time.monotonic() - started < DRAIN_S + HANG_GUARD_S
    finally:
        os.kill(int((workspace.host_dir / "escaped.pid").read_text()), signal.SIGKILL)


def _ends_within(pid: int, limit_s: float) -> bool:
    """Wait for process `pid` to be gone (or a zombie nobody reaped yet)."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return True
        if state in ("Z", "X"):
            return True
        time.sleep(0.05)
    return False
