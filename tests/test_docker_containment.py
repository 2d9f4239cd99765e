"""Inside the container, paths are contained exactly as LocalWorkspace contains
them, and a hostile repository's links never reach the host."""

import os

import pytest

from dispatcher.errors import ToolInputError, WorkspaceError
from sandbox.local import LocalWorkspace
from sandbox.docker_container import SANDBOX_UID
from sandbox.workspace import Command, Entry
from tests.support.docker_engine import docker_engine, docker_settings, docker_workspace, host_canary  # noqa: F401
from tests.support.workspaces import make_deep_tree

pytestmark = pytest.mark.docker


def _hostile_tree(root, canary):
    """A workspace a hostile repository could produce: links at a host file and out of the tree."""
    (root / "README.md").write_text("# readme\nline two\n")
    (root / "src").mkdir()
    (root / "src" / "main.c").write_text("int main(void) { return 0; }\n")
    os.symlink(str(canary), root / "canary-absolute")
    os.symlink("../" * 12 + str(canary).lstrip("/"), root / "canary-relative")
    os.symlink(str(canary.parent), root / "host-tmp")
    os.symlink("/", root / "host-root")
    os.symlink("src/main.c", root / "inside-link")
    os.symlink("missing-target", root / "dangling")
    (root / ".git").mkdir()
    (root / ".git" / "HEAD").write_text("ref: refs/heads/main\n")


@pytest.fixture
def hostile(docker_workspace, host_canary):
    canary, secret = host_canary
    _hostile_tree(docker_workspace.host_dir, canary)
    docker_workspace.after_prepare()
    return docker_workspace, canary, secret


@pytest.fixture
def both(docker_workspace, host_canary):
    """The same hostile tree in a LocalWorkspace and a DockerWorkspace."""
    canary, _ = host_canary
    local = LocalWorkspace.open("repo")
    for workspace in (local, docker_workspace):
        _hostile_tree(workspace.host_dir, canary)
    docker_workspace.after_prepare()
    yield local, docker_workspace
    local.close()


REFUSED_PATHS = [
    "..",
    "../etc/passwd",
    "src/../../etc",
    "/etc/passwd",
    "/workspace/README.md",
    "canary-absolute",
    "canary-relative",
    "host-tmp/anything",
    "host-root/etc/passwd",
    "README.md\x00.txt",
    "../workspace2/secret",
    "missing/../../etc",
]


@pytest.mark.parametrize("path", REFUSED_PATHS)
def test_escaping_path_is_refused_by_every_method(hostile, path):
    """`..`, absolute paths, links out, NUL bytes and sibling prefixes are refused by every method."""
    workspace, _, _ = hostile
    for call in (
        lambda: workspace.resolve(path),
        lambda: workspace.read_bytes(path, 1000),
        lambda: workspace.list_dir(path),
        lambda: list(workspace.walk(path)),
        lambda: workspace.write_bytes(path, b"x"),
        lambda: workspace.run(Command(["ls"], cwd=path)),
    ):
        with pytest.raises(ToolInputError):
            call()


def test_symlink_to_host_canary_is_never_read(hostile):
    """No workspace method returns the host canary's content, whatever link the repository planted."""
    workspace, canary, secret = hostile
    seen = b""
    for name in ("canary-absolute", "canary-relative", "host-tmp/" + canary.name):
        with pytest.raises(ToolInputError, match="outside the workspace"):
            workspace.read_bytes(name, 10_000)
    for entry in workspace.walk("."):
        seen += entry.path.encode()
    for entry in workspace.list_dir("."):
        seen += entry.path.encode()
    for argv in (["cat", "canary-absolute"], ["cat", "canary-relative"], ["cat", str(canary)],
                 ["sh", "-c", "cat host-tmp/*"], ["rg", "--follow", "CANARY", "host-tmp", "canary-absolute"]):
        result = workspace.run(Command(argv))
        seen += result.stdout + result.stderr
    assert secret not in seen
    assert canary.read_bytes().strip() == secret  # still there: the tests really had something to find


def test_walk_lists_links_without_following_them(hostile):
    """walk reports links as links and never descends through one (nor into .git)."""
    workspace, _, _ = hostile
    entries = {entry.path: entry.kind for entry in workspace.walk(".")}
    assert entries["host-root"] == "symlink"
    assert entries["host-tmp"] == "symlink"
    assert not any(path.startswith(("host-root/", "host-tmp/", ".git")) for path in entries)
    assert entries["src/main.c"] == "file"


def test_links_inside_the_workspace_still_work(hostile):
    """A link to a file inside the workspace is followed to that file."""
    workspace, _, _ = hostile
    assert workspace.resolve("inside-link") == "src/main.c"
    assert workspace.read_bytes("inside-link", 100).data.startswith(b"int main")


def test_same_answers_as_the_local_backend(both):
    """resolve, read_bytes, list_dir, walk and write_bytes agree with LocalWorkspace, errors included."""
    local, docker = both

    def outcome(call):
        try:
            return ("ok", call())
        except (ToolInputError, WorkspaceError) as exc:
            return (type(exc).__name__, str(exc))

    calls = []
    for path in [".", "src", "src/main.c", "README.md", "inside-link", "dangling", "nope", *REFUSED_PATHS]:
        calls += [
            (f"resolve {path!r}", lambda w, p=path: w.resolve(p)),
            (f"read {path!r}", lambda w, p=path: w.read_bytes(p, 5, 2)),
            (f"list {path!r}", lambda w, p=path: w.list_dir(p)),
            (f"walk {path!r}", lambda w, p=path: list(w.walk(p))),
        ]
    calls.append(("write", lambda w: w.write_bytes("pages/new/page.md", b"fetched")))
    calls.append(("read back", lambda w: w.read_bytes("pages/new/page.md", 100)))
    for name, call in calls:
        assert outcome(lambda: call(docker)) == outcome(lambda: call(local)), name


def test_commands_run_in_the_workspace_with_their_own_exit_code(hostile):
    """run executes the argv in the workspace (or a subdirectory) and reports its exit code and output."""
    workspace, _, _ = hostile
    result = workspace.run(Command(["sh", "-c", "pwd; ls; echo oops >&2; exit 3"], cwd="src"))
    assert result.exit_code == 3
    assert result.stdout == b"/workspace/src\nmain.c\n"
    assert result.stderr == b"oops\n"
    assert not result.timed_out


def test_command_output_is_capped(docker_workspace):
    """stdout beyond max_output_bytes is dropped and flagged as truncated."""
    result = docker_workspace.run(Command(["head", "-c", "100000", "/dev/zero"], max_output_bytes=1000))
    assert len(result.stdout) == 1000
    assert result.truncated


def test_command_that_outlives_its_timeout_is_killed(docker_workspace):
    """A command past its timeout is killed and reported as timed out; the workspace still answers."""
    result = docker_workspace.run(Command(["sleep", "30"], timeout_s=1))
    assert result.timed_out
    assert docker_workspace.resolve(".") == "."


def test_missing_program_is_a_workspace_error(docker_workspace):
    """A program the image lacks is reported like the local backend does."""
    with pytest.raises(WorkspaceError, match="nosuchprogram is not installed or not on PATH"):
        docker_workspace.run(Command(["nosuchprogram"]))


def test_handing_the_workspace_over_never_reowns_a_link_target(docker_workspace, host_canary):
    """As root, the tree is given to the sandbox user before the model runs; links are re-owned themselves,
    and the host files they name stay root's. Until then only root can reach the workspace's parent."""
    if os.getuid() != 0:
        pytest.skip("the hand-over happens only when research runs as root")
    canary, _ = host_canary
    parent = docker_workspace.host_dir.parent
    assert (parent.stat().st_uid, parent.stat().st_mode & 0o777) == (0, 0o700)
    root = docker_workspace.host_dir
    (root / "src").mkdir()
    (root / "src" / "main.c").write_text("int main;\n")
    os.symlink(str(canary), root / "src" / "to-canary")
    os.symlink(str(canary.parent), root / "to-host-tmp")
    docker_workspace.after_prepare()
    assert canary.stat().st_uid == 0 and canary.parent.stat().st_uid == 0
    assert os.lstat(root / "src" / "to-canary").st_uid == SANDBOX_UID
    assert (root / "src" / "main.c").stat().st_uid == SANDBOX_UID
    assert (root.stat().st_uid, root.stat().st_mode & 0o777) == (SANDBOX_UID, 0o700)


def test_a_tree_deeper_than_pythons_recursion_limit_is_handed_over_and_removed(docker_settings):
    """A hostile repository deeper than Python's recursion limit neither crashes the hand-over nor survives cleanup."""
    from sandbox.docker import DockerWorkspace

    workspace = DockerWorkspace.open("repo", docker_settings)
    try:
        make_deep_tree(workspace.host_dir)
        workspace.after_prepare()
        assert workspace.list_dir(".") == [Entry(path="d", kind="dir", size=0)]
    finally:
        workspace.close()
    assert not workspace.host_dir.parent.exists()


def test_a_walk_of_a_huge_tree_stops_after_its_cap(docker_workspace, monkeypatch):
    """walk lists at most MAX_WALK_ENTRIES + 1 entries, so a tree of millions costs bounded host memory
    (the cap is lowered here to keep the tree small)."""
    import sandbox.docker

    monkeypatch.setattr(sandbox.docker, "MAX_WALK_ENTRIES", 9)
    for number in range(40):
        (docker_workspace.host_dir / f"file-{number:02d}").write_text("x")
    docker_workspace.after_prepare()
    assert len(list(docker_workspace.walk("."))) == 10


def test_a_listing_too_long_to_fetch_whole_is_refused_not_cut(docker_workspace, monkeypatch):
    """When the names below a directory exceed the listing cap (lowered here), walk and list_dir say so
    instead of returning part of it as if it were all."""
    import sandbox.docker

    monkeypatch.setattr(sandbox.docker, "MAX_LISTING_BYTES", 400)
    for number in range(40):
        (docker_workspace.host_dir / f"a-rather-long-file-name-{number:02d}").write_text("x")
    docker_workspace.after_prepare()
    for call in (lambda: list(docker_workspace.walk(".")), lambda: docker_workspace.list_dir(".")):
        with pytest.raises(ToolInputError, match=r"'\.' holds more than can be listed at once"):
            call()
