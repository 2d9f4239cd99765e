"""A remote engine (DOCKER_HOST=tcp://... or ssh://...) gets the workspace copied in and out, never
bind-mounted."""

import os
from concurrent.futures import ThreadPoolExecutor

import pytest

from sandbox.docker import DockerWorkspace
from sandbox.workspace import Command
from tests.support.docker_engine import (  # noqa: F401
    docker_engine,
    docker_settings,
    host_canary,
    inspect,
    ssh_engine,
    tcp_engine,
)

pytestmark = pytest.mark.docker


@pytest.fixture
def remote_workspace(docker_settings, tcp_engine, host_canary):
    canary, _ = host_canary
    workspace = DockerWorkspace.open("repo", docker_settings, environ=tcp_engine)
    root = workspace.host_dir
    (root / "README.md").write_text("remote readme\n")
    (root / "docs").mkdir()
    (root / "docs" / "guide.md").write_text("guide\n")
    os.symlink("README.md", root / "inside-link")
    os.symlink(str(canary), root / "canary-link")
    workspace.after_prepare()
    yield workspace
    workspace.close()


def test_tcp_engine_gets_a_volume_not_a_bind_mount(remote_workspace, docker_engine):
    """Over tcp:// the container's /workspace is a volume: no host path is mounted at all."""
    mounts = inspect(docker_engine, remote_workspace.container_id)["Mounts"]
    assert [(mount["Type"], mount["Destination"]) for mount in mounts] == [("volume", "/workspace")]
    assert not inspect(docker_engine, remote_workspace.container_id)["HostConfig"]["Binds"]


def test_copied_workspace_works_like_a_mounted_one(remote_workspace):
    """Files, directories and inside links arrive; writes and commands work over the TCP engine."""
    assert remote_workspace.read_bytes("inside-link", 100).data == b"remote readme\n"
    assert [entry.path for entry in remote_workspace.list_dir("docs")] == ["docs/guide.md"]
    assert remote_workspace.write_bytes("pages/one.md", b"page one") == "pages/one.md"
    result = remote_workspace.run(Command(["cat", "pages/one.md", "docs/guide.md"]))
    assert result.stdout == b"page oneguide\n"


def test_copied_link_to_host_file_resolves_inside_the_container(remote_workspace, host_canary):
    """A link at a host file is copied as a link and points into the container, where it is refused."""
    _, secret = host_canary
    with pytest.raises(Exception, match="outside the workspace"):
        remote_workspace.read_bytes("canary-link", 1000)
    result = remote_workspace.run(Command(["cat", "canary-link"]))
    assert secret not in result.stdout + result.stderr


def test_kept_remote_workspace_is_copied_back_without_links(docker_settings, tcp_engine, docker_engine):
    """--no-cleanup copies the container's files back to the host directory, leaving links behind."""
    workspace = DockerWorkspace.open("web", docker_settings, environ=tcp_engine)
    workspace.after_prepare()
    workspace.write_bytes("pages/a.md", b"fetched page")
    workspace.run(Command(["ln", "-s", "/etc/passwd", "pages/link"]))
    workspace.close(keep=True)
    try:
        assert (workspace.host_dir / "pages" / "a.md").read_bytes() == b"fetched page"
        assert not os.path.lexists(workspace.host_dir / "pages" / "link")
        message = workspace.kept_message()
        assert str(workspace.host_dir) in message
        assert f"DOCKER_HOST={tcp_engine['DOCKER_HOST']} docker exec -it" in message
        assert "1 entries stayed in the container (links, special files, or files past the size limit), " \
            "e.g. workspace/pages/link: is a link" in message
    finally:
        docker_engine.containers.get(workspace.container_id).remove(force=True, v=True)
        import shutil

        shutil.rmtree(workspace.host_dir)


def test_kept_remote_workspace_copies_back_no_more_than_its_limit(docker_settings, tcp_engine, docker_engine,
                                                                  monkeypatch):
    """A huge sparse file made in the container (no disk there, all of it here) stays in the container
    when --no-cleanup copies back; the files within the limit come back."""
    from sandbox import docker_transfer

    monkeypatch.setattr(docker_transfer, "COPY_BACK_MIN_BYTES", 1_000_000)
    workspace = DockerWorkspace.open("web", docker_settings, environ=tcp_engine)
    workspace.after_prepare()
    workspace.write_bytes("pages/a.md", b"fetched page")
    assert workspace.run(Command(["truncate", "-s", "64M", "pages/sparse"])).exit_code == 0
    workspace.close(keep=True)
    try:
        assert (workspace.host_dir / "pages" / "a.md").read_bytes() == b"fetched page"
        assert not (workspace.host_dir / "pages" / "sparse").exists()
        assert "workspace/pages/sparse: would take what is copied back past 1,000,000 bytes" in \
            workspace.kept_message()
    finally:
        docker_engine.containers.get(workspace.container_id).remove(force=True, v=True)
        import shutil

        shutil.rmtree(workspace.host_dir)


def test_remote_close_removes_container_and_volume(docker_settings, tcp_engine, docker_engine):
    """Closing removes the container and its anonymous workspace volume."""
    workspace = DockerWorkspace.open("repo", docker_settings, environ=tcp_engine)
    volume = inspect(docker_engine, workspace.container_id)["Mounts"][0]["Name"]
    workspace.close()
    assert volume not in {v.name for v in docker_engine.volumes.list()}


def test_ssh_engine_runs_parallel_tool_calls_within_sshds_session_limit(docker_settings, ssh_engine, docker_engine):
    """Over ssh:// (a real sshd on loopback, MaxSessions 10 as shipped), the workspace is copied in, and
    eight parallel commands and sixteen parallel writes all succeed: the SDK's sessions stay within the
    limit; closing removes the container."""
    workspace = DockerWorkspace.open("web", docker_settings, environ=ssh_engine)
    try:
        (workspace.host_dir / "README.md").write_text("over ssh\n")
        workspace.after_prepare()
        assert inspect(docker_engine, workspace.container_id)["Mounts"][0]["Type"] == "volume"
        with ThreadPoolExecutor(8) as pool:
            outputs = list(pool.map(lambda n: workspace.run(Command(["sh", "-c", f"sleep 0.2; echo {n}"])).stdout,
                                    range(8)))
            written = list(pool.map(lambda n: workspace.write_bytes(f"pages/{n}.md", b"page"), range(16)))
        assert outputs == [f"{n}\n".encode() for n in range(8)]
        assert written == [f"pages/{n}.md" for n in range(16)]
        assert workspace.read_bytes("README.md", 100).data == b"over ssh\n"
        container_id = workspace.container_id
    finally:
        workspace.close()
    assert container_id not in {c.id for c in docker_engine.containers.list(all=True)}
