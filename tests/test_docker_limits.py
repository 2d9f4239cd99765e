"""Hostile commands hit the container's limits and the workspace survives them."""

import re

import pytest

from sandbox.workspace import Command
from tests.support.docker_engine import docker_engine, docker_settings, docker_workspace  # noqa: F401

pytestmark = pytest.mark.docker


def test_fork_bomb_is_contained(docker_workspace):
    """A fork bomb runs into pids_limit, is killed at its timeout, and the workspace answers afterwards."""
    docker_workspace.write_bytes("still-here.txt", b"yes")
    # `sleep` starts first: once the bomb fills pids_limit, nothing more can fork.
    bomb = "bomb() { bomb | bomb & }; sleep 60 & bomb; wait"
    result = docker_workspace.run(Command(["sh", "-c", bomb], timeout_s=3))
    assert result.timed_out
    assert b"Cannot fork" in result.stderr or b"Resource temporarily unavailable" in result.stderr
    assert docker_workspace.read_bytes("still-here.txt", 10).data == b"yes"
    assert docker_workspace.run(Command(["true"])).exit_code == 0


@pytest.mark.parametrize("path", ["servers", "plain exec"])
def test_processes_left_filling_pids_limit_die_with_their_command(docker_workspace, docker_settings, path):
    """A command that fills pids_limit with background sleeps and exits takes them with it, so the calls
    after it can still fork (through the command servers, and by plain exec)."""
    if path == "plain exec":
        docker_workspace._channels.close()  # a closed pool runs every call by plain exec
    docker_workspace.write_bytes("still-here.txt", b"yes")
    fill = f"i=0; while [ $i -lt {docker_settings.pids_limit} ]; do sleep 300 & i=$((i+1)); done; exit 0"
    docker_workspace.run(Command(["sh", "-c", fill], timeout_s=20))
    assert docker_workspace.run(Command(["cat", "still-here.txt"])).stdout == b"yes"
    assert docker_workspace.read_bytes("still-here.txt", 10).data == b"yes"
    assert _processes_matching(docker_workspace, "^sleep 300") == 0


@pytest.mark.parametrize("path", ["servers", "plain exec"])
def test_what_a_command_leaves_running_dies_with_it(docker_workspace, path):
    """A background child outlives neither its command nor the call: it is killed when the command exits."""
    if path == "plain exec":
        docker_workspace._channels.close()
    result = docker_workspace.run(Command(["sh", "-c", "sleep 300 & echo started"], timeout_s=20))
    assert (result.exit_code, result.stdout, result.timed_out) == (0, b"started\n", False)
    assert _processes_matching(docker_workspace, "^sleep 300") == 0


def _processes_matching(workspace, pattern: str) -> int:
    """How many live processes in the container have a command line matching `pattern`."""
    listing = "for p in /proc/[0-9]*; do tr '\\000' ' ' < $p/cmdline 2>/dev/null; echo; done"
    lines = workspace.run(Command(["sh", "-c", listing])).stdout.decode().splitlines()
    return sum(1 for line in lines if re.match(pattern, line))


def test_memory_hog_is_killed(docker_workspace):
    """A command that eats memory is killed by the memory limit (no swap), and the workspace answers afterwards."""
    # tail keeps every byte of a file without newlines: memory grows without bound.
    result = docker_workspace.run(Command(["tail", "/dev/zero"], timeout_s=25))
    assert result.exit_code == 137
    assert not result.timed_out
    assert docker_workspace.resolve(".") == "."
    assert docker_workspace.run(Command(["true"])).exit_code == 0


def test_tmp_is_size_capped(docker_workspace, docker_settings):
    """Filling /tmp stops at its tmpfs size."""
    result = docker_workspace.run(Command(["sh", "-c", "head -c 200m /dev/zero > /tmp/fill"], timeout_s=25))
    assert result.exit_code != 0
    assert b"No space left on device" in result.stderr


def test_background_child_holding_the_output_does_not_hang_the_call(docker_workspace):
    """A command whose detached child keeps stdout open still returns, as timed out."""
    result = docker_workspace.run(Command(["sh", "-c", "setsid sleep 120 & sleep 120"], timeout_s=1))
    assert result.timed_out
    assert docker_workspace.resolve(".") == "."


def test_helper_that_runs_out_of_time_is_a_sandbox_error(docker_engine, docker_settings):
    """A workspace call that cannot finish within exec_timeout_s fails with one sentence naming the limit."""
    import os

    import attrs

    from dispatcher.errors import SandboxError
    from sandbox import open_workspace

    # A starved CPU share and a large (sparse) file: the read cannot finish in a second.
    settings = attrs.evolve(docker_settings, exec_timeout_s=1, cpus=0.05)
    with open_workspace("repo", settings) as workspace:
        with open(workspace.host_dir / "big.bin", "wb") as handle:
            os.ftruncate(handle.fileno(), 500_000_000)
        workspace.after_prepare()
        with pytest.raises(SandboxError, match=r"^the sandbox's read command timed out after 1 s$"):
            workspace.read_bytes("big.bin", 500_000_000)
