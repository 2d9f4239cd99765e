"""The sandbox container is locked down by default, as `docker inspect` shows."""

import pytest

from sandbox.workspace import Command
from tests.support.docker_engine import (  # noqa: F401
    TEST_MEMORY,
    TEST_PIDS_LIMIT,
    docker_engine,
    docker_settings,
    docker_workspace,
    inspect,
)

pytestmark = pytest.mark.docker

HOST_SECRETS = {
    "OPENAI_API_KEY": "sk-host-openai-secret",
    "ANTHROPIC_API_KEY": "sk-ant-host-secret",
    "AWS_SECRET_ACCESS_KEY": "aws-host-secret",
    "AWS_ACCESS_KEY_ID": "AKIAHOSTSECRET",
    "GITHUB_TOKEN": "ghp_hostsecret",
    "GOOGLE_APPLICATION_CREDENTIALS": "/host/creds.json",
}


@pytest.fixture
def inspected(docker_engine, docker_workspace):
    return inspect(docker_engine, docker_workspace.container_id)


def test_container_has_no_network(inspected):
    """The container's only network is `none`, and it publishes no port."""
    assert inspected["HostConfig"]["NetworkMode"] == "none"
    assert not inspected["HostConfig"]["PortBindings"]
    assert not inspected["HostConfig"]["PublishAllPorts"]
    assert list(inspected["NetworkSettings"]["Networks"]) == ["none"]


def test_root_filesystem_is_read_only_with_a_capped_tmp(inspected, docker_settings):
    """The root is read-only and /tmp is a size-capped, noexec tmpfs."""
    assert inspected["HostConfig"]["ReadonlyRootfs"] is True
    tmp_options = inspected["HostConfig"]["Tmpfs"]["/tmp"].split(",")
    assert f"size={docker_settings.tmp_size}" in tmp_options
    assert "noexec" in tmp_options


def test_all_capabilities_dropped_and_no_new_privileges(inspected):
    """Every capability is dropped, no-new-privileges is set, nothing is privileged."""
    assert inspected["HostConfig"]["CapDrop"] == ["ALL"]
    assert not inspected["HostConfig"]["CapAdd"]
    assert "no-new-privileges:true" in inspected["HostConfig"]["SecurityOpt"]
    assert inspected["HostConfig"]["Privileged"] is False


def test_runs_as_a_non_root_user(inspected, docker_workspace):
    """The configured user and the user a command actually runs as are not root."""
    user = inspected["Config"]["User"]
    assert user and not user.startswith("0:") and user not in ("0", "root")
    result = docker_workspace.run(Command(["id", "-u"]))
    assert result.stdout.strip() not in (b"", b"0")


def test_process_memory_and_cpu_limits(inspected):
    """pids, memory (with no swap beyond it) and CPU limits come from [sandbox]."""
    host = inspected["HostConfig"]
    assert host["PidsLimit"] == TEST_PIDS_LIMIT
    expected_bytes = int(TEST_MEMORY.rstrip("m")) * 1024 * 1024
    assert host["Memory"] == expected_bytes
    assert host["MemorySwap"] == expected_bytes
    assert host["NanoCpus"] == 1_000_000_000


def test_no_host_namespaces(inspected):
    """The container shares neither the host's pid nor its ipc namespace."""
    assert inspected["HostConfig"]["PidMode"] in ("", "private")
    assert inspected["HostConfig"]["IpcMode"] == "private"
    assert inspected["HostConfig"]["UsernsMode"] in ("", "private")


def test_only_the_workspace_is_mounted(inspected, docker_workspace):
    """The one mount is the workspace at /workspace: no Docker socket, no other host path."""
    mounts = inspected["Mounts"]
    assert [mount["Destination"] for mount in mounts] == ["/workspace"]
    assert mounts[0]["Source"] == str(docker_workspace.host_dir)
    assert not inspected["HostConfig"]["Binds"]
    assert all("docker.sock" not in str(mount) for mount in mounts)


def test_labels_name_the_run_and_mode(inspected):
    """Labels tie the container to its run, so prune and reaping can find it."""
    labels = inspected["Config"]["Labels"]
    assert labels["research.mode"] == "repo"
    assert labels["research.run"]


def test_host_secrets_never_enter_the_container(docker_settings, docker_engine, monkeypatch):
    """API keys, tokens and cloud credentials of the host are absent from the
    container's environment and from what a command there sees."""
    from sandbox.docker import DockerWorkspace

    for name, value in HOST_SECRETS.items():
        monkeypatch.setenv(name, value)
    with DockerWorkspace.open("web", docker_settings) as workspace:
        environment = inspect(docker_engine, workspace.container_id)["Config"]["Env"]
        seen = workspace.run(Command(["env"])).stdout.decode()
    names = {entry.partition("=")[0] for entry in environment}
    assert names <= {"PATH", "HOME", "LANG"}
    for name, value in HOST_SECRETS.items():
        assert name not in seen and value not in seen
        assert all(value not in entry for entry in environment)


def test_commands_see_no_network_and_no_capabilities(docker_workspace):
    """Inside, only the loopback interface exists and the effective capability set is empty."""
    interfaces = docker_workspace.run(Command(["cat", "/proc/net/dev"])).stdout.decode()
    names = {line.split(":")[0].strip() for line in interfaces.splitlines()[2:]}
    assert names <= {"lo"}
    status = docker_workspace.run(Command(["cat", "/proc/self/status"])).stdout.decode()
    capabilities = dict(line.split(":\t") for line in status.splitlines() if line.startswith("Cap"))
    assert int(capabilities["CapEff"], 16) == 0
    assert status.count("NoNewPrivs:\t1") == 1


def test_root_filesystem_refuses_writes(docker_workspace):
    """A command cannot write outside /workspace and /tmp."""
    result = docker_workspace.run(Command(["sh", "-c", "echo x > /etc/owned"]))
    assert result.exit_code != 0
    assert b"Read-only file system" in result.stderr
