"""A run's container comes and goes with its workspace; leftovers are pruned by label."""

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import attrs
import pytest

from dispatcher.errors import SandboxError
from sandbox import open_workspace
from sandbox.docker_container import LABEL_RUN, RunIdentity, create_kwargs, reap
from sandbox.docker_engine import image_name
from sandbox.workspace import Command
from tests.support.docker_engine import docker_engine, docker_settings  # noqa: F401

pytestmark = pytest.mark.docker

REPO_ROOT = Path(__file__).resolve().parent.parent


def _exists(client, container_id) -> bool:
    import docker

    try:
        client.containers.get(container_id)
    except docker.errors.NotFound:
        return False
    return True


def test_close_removes_container_and_workspace(docker_engine, docker_settings):
    """Closing the workspace removes its container and its host directory."""
    workspace = open_workspace("repo", docker_settings)
    container_id = workspace.container_id
    assert _exists(docker_engine, container_id)
    workspace.close()
    assert not _exists(docker_engine, container_id)
    assert not workspace.host_dir.exists()
    workspace.close()  # a second close is harmless


def test_error_inside_the_run_still_removes_the_container(docker_engine, docker_settings):
    """An exception while the workspace is open (as a failing run raises) removes the container."""
    with pytest.raises(RuntimeError):
        with open_workspace("repo", docker_settings) as workspace:
            container_id = workspace.container_id
            raise RuntimeError("the run failed")
    assert not _exists(docker_engine, container_id)
    assert not workspace.host_dir.exists()


def test_no_cleanup_keeps_both_and_says_how_to_open_them(docker_engine, docker_settings):
    """With keep, the container and directory stay, and the message names the path and a docker exec line."""
    workspace = open_workspace("repo", docker_settings)
    (workspace.host_dir / "notes.txt").write_text("kept\n")
    workspace.after_prepare()
    workspace.close(keep=True)
    try:
        message = workspace.kept_message()
        container = docker_engine.containers.get(workspace.container_id)
        assert container.status == "running"
        assert str(workspace.host_dir) in message
        assert f"docker exec -it {container.short_id} sh" in message
        assert (workspace.host_dir / "notes.txt").read_text() == "kept\n"
        shell = container.exec_run(["cat", "/workspace/notes.txt"])
        assert shell.output == b"kept\n"
    finally:
        docker_engine.containers.get(workspace.container_id).remove(force=True)
        subprocess.run(["rm", "-rf", str(workspace.host_dir)], check=True)


@pytest.mark.parametrize("signal_number", [signal.SIGINT, signal.SIGTERM])
def test_interrupted_run_removes_its_container(docker_engine, docker_settings, signal_number):
    """Ctrl-C or SIGTERM (which the CLI turns into an exception) mid-run removes the container."""
    script = textwrap.dedent(f"""
        import signal, sys, time
        from config.schema import SandboxSettings
        from dispatcher import interrupts
        from sandbox import open_workspace

        interrupts.install()  # as dispatcher/cli.py does
        with open_workspace("repo", SandboxSettings(backend="docker", memory="{docker_settings.memory}")) as ws:
            print(ws.container_id, ws.host_dir, flush=True)
            signal.pause()
    """)
    process = subprocess.Popen([sys.executable, "-c", script], cwd=REPO_ROOT, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    container_id, host_dir = process.stdout.readline().split()
    assert _exists(docker_engine, container_id)
    process.send_signal(signal_number)
    process.wait(timeout=60)
    assert not _exists(docker_engine, container_id)
    assert not Path(host_dir).exists()


def _orphan(client, settings, *, pid: int, host: str | None = None):
    """A container labelled as if a run with `pid` had made it and been killed."""
    identity = attrs.evolve(RunIdentity.current("repo"), pid=pid, pid_start="1")
    if host is not None:
        identity = attrs.evolve(identity, host=host)
    kwargs = create_kwargs(settings, image_name(settings), identity, user="10001:10001", bind_source=None)
    return client.containers.create(**kwargs)


def _dead_pid() -> int:
    process = subprocess.Popen(["true"])
    process.wait()
    return process.pid


def test_prune_removes_containers_of_killed_runs_only(docker_engine, docker_settings):
    """`research sandbox prune` removes containers whose run is gone and spares a live run's."""
    from sandbox.docker_admin import prune_containers

    orphan = _orphan(docker_engine, docker_settings, pid=_dead_pid())
    with open_workspace("repo", docker_settings) as live:
        live.after_prepare()
        live_id = live.container_id
        removed = prune_containers(docker_settings)
        assert removed >= 1
        assert not _exists(docker_engine, orphan.id)
        assert _exists(docker_engine, live_id)
        assert live.run(Command(["true"])).exit_code == 0


def test_reaping_spares_young_containers_and_foreign_hosts(docker_engine, docker_settings):
    """A run's own reaping waits a day, and never removes a young container of another host's run."""
    young_orphan = _orphan(docker_engine, docker_settings, pid=_dead_pid())
    foreign = _orphan(docker_engine, docker_settings, pid=1, host="some-other-host")
    try:
        reap(docker_engine, min_age_s=86_400, remove_foreign=True)
        assert _exists(docker_engine, young_orphan.id)
        assert _exists(docker_engine, foreign.id)
        assert LABEL_RUN in docker_engine.containers.get(foreign.id).labels
    finally:
        young_orphan.remove(force=True, v=True)
        foreign.remove(force=True, v=True)


def test_every_run_reaps_stale_containers_of_gone_runs(docker_engine, docker_settings, monkeypatch):
    """Opening a workspace removes, in the background, containers of this host's runs that are gone and
    old enough (a day; none here, so "old enough" is lowered to 0 s), and spares a live run's and another
    host's young one."""
    import sandbox.docker

    orphan = _orphan(docker_engine, docker_settings, pid=_dead_pid())
    foreign = _orphan(docker_engine, docker_settings, pid=1, host="some-other-host")
    try:
        with open_workspace("repo", docker_settings) as live:
            monkeypatch.setattr(sandbox.docker, "STALE_AFTER_S", 0)
            reaping = open_workspace("repo", docker_settings)
            reaping.close()  # waits for the start-up thread, reaping included
            assert not _exists(docker_engine, orphan.id)
            assert _exists(docker_engine, live.container_id)
            assert _exists(docker_engine, foreign.id)
    finally:
        for container in (orphan, foreign):
            if _exists(docker_engine, container.id):
                container.remove(force=True, v=True)


def test_unreachable_engine_names_docker_host_and_socket(docker_settings):
    """With no engine at DOCKER_HOST, the error names DOCKER_HOST and the address tried."""
    from sandbox.docker import DockerWorkspace

    environ = dict(os.environ, DOCKER_HOST="unix:///nonexistent/docker.sock")
    with pytest.raises(SandboxError) as caught:
        DockerWorkspace.open("repo", docker_settings, environ=environ)
    message = str(caught.value)
    assert "unix:///nonexistent/docker.sock" in message and "DOCKER_HOST" in message
    assert "\n" not in message


def test_missing_image_says_how_to_build_it(docker_settings):
    """A run whose image is missing fails at once with the command that builds it."""
    settings = attrs.evolve(docker_settings, image="research-sandbox:no-such-version")
    with pytest.raises(SandboxError, match="research sandbox build"):
        open_workspace("repo", settings)


def test_container_that_fails_to_start_is_one_sentence(docker_engine, docker_settings):
    """A container the engine cannot start (an invalid /tmp size) fails with one sentence, exit 1,
    once the workspace is prepared (before the model is called), and closing still removes it."""
    settings = attrs.evolve(docker_settings)
    # The configuration refuses this size; it stands in for whatever else the
    # engine refuses only at start, which no validation of ours can foresee.
    object.__setattr__(settings, "tmp_size", "lots")
    workspace = open_workspace("repo", settings)
    try:
        with pytest.raises(SandboxError) as caught:
            workspace.after_prepare()
        assert caught.value.exit_code == 1
        assert str(caught.value).startswith("the sandbox container failed to start: ")
        assert "\n" not in str(caught.value)
    finally:
        container_id = workspace.container_id
        workspace.close()
    assert not _exists(docker_engine, container_id)
