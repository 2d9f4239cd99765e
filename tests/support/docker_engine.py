"""Fixtures for tests that need a real Docker engine and the sandbox image.

`docker_engine` is the one gate: with RESEARCH_REQUIRE_DOCKER=1 (CI) a missing
engine or image FAILS the test; elsewhere the test is skipped with the reason.
Tests that use it are marked `@pytest.mark.docker`.
"""

from __future__ import annotations

import os
import secrets
import socket
import threading
from pathlib import Path

import pytest

from config.schema import SandboxSettings
from dispatcher.errors import SandboxError

REQUIRE_DOCKER_VARIABLE = "RESEARCH_REQUIRE_DOCKER"
# Small limits, so the limit tests hit them quickly.
TEST_MEMORY = "192m"
TEST_PIDS_LIMIT = 64
TEST_EXEC_TIMEOUT_S = 30
SSHD_START_TIMEOUT_S = 10


def docker_unavailable(reason: str):
    """Fail (CI) or skip (a laptop without Docker) with `reason`."""
    if os.environ.get(REQUIRE_DOCKER_VARIABLE) == "1":
        pytest.fail(f"{REQUIRE_DOCKER_VARIABLE}=1 but there is no usable Docker engine: {reason}", pytrace=False)
    pytest.skip(f"no Docker engine: {reason}")


@pytest.fixture(scope="session")
def docker_engine():
    """A DockerClient on a reachable engine that has the sandbox image."""
    from sandbox.docker_engine import connect, image_name, require_image

    try:
        client = connect()
    except SandboxError as exc:
        docker_unavailable(str(exc))
    try:
        require_image(client, image_name(SandboxSettings()))
    except SandboxError as exc:
        client.close()
        docker_unavailable(str(exc))
    yield client
    client.close()


@pytest.fixture
def docker_settings(docker_engine) -> SandboxSettings:
    return SandboxSettings(backend="docker", memory=TEST_MEMORY, pids_limit=TEST_PIDS_LIMIT,
                           exec_timeout_s=TEST_EXEC_TIMEOUT_S)


@pytest.fixture
def docker_workspace(docker_settings):
    """An open, prepared (empty) DockerWorkspace, bind-mounted, closed after the
    test. A test that writes into host_dir calls after_prepare() again, as a
    mode does once its content is there."""
    from sandbox.docker import DockerWorkspace

    workspace = DockerWorkspace.open("repo", docker_settings)
    workspace.after_prepare()
    yield workspace
    workspace.close()


@pytest.fixture
def host_canary(tmp_path_factory):
    """A file in the host's /tmp holding a secret no workspace method may ever return."""
    path = Path(f"/tmp/canary-{secrets.token_hex(6)}")
    secret = f"CANARY-{secrets.token_hex(16)}"
    path.write_text(secret + "\n")
    yield path, secret.encode()
    path.unlink(missing_ok=True)


def inspect(client, container_id: str) -> dict:
    return client.api.inspect_container(container_id)


@pytest.fixture
def tcp_engine(docker_engine):
    """The same engine reached over a loopback TCP socket: an environment with
    DOCKER_HOST=tcp://127.0.0.1:<port>, as for a remote engine.

    A forwarder to the engine's unix socket stands in for `dockerd -H tcp://...`,
    so no unauthenticated TCP listener outlives the test.
    """
    from sandbox.docker_engine import engine_address

    address = engine_address()
    if not address.startswith("unix://"):
        docker_unavailable(f"the loopback TCP test needs a unix-socket engine, not {address}")
    forwarder = _Forwarder(address.removeprefix("unix://"))
    environ = {k: v for k, v in os.environ.items() if not k.startswith("DOCKER_")}
    environ["DOCKER_HOST"] = f"tcp://127.0.0.1:{forwarder.port}"
    yield environ
    forwarder.close()


@pytest.fixture
def ssh_engine(docker_engine, tmp_path, monkeypatch):
    """The same engine reached over SSH: an environment with
    DOCKER_HOST=ssh://<user>@127.0.0.1:<port>, and HOME (set in this process
    too, where paramiko reads ~/.ssh) whose ~/.ssh names the key and trusts the
    host key; served by a real OpenSSH sshd started for the test on loopback
    (the SDK then runs `docker system dial-stdio` through it)."""
    import getpass
    import shutil
    import subprocess
    import time

    sshd = shutil.which("sshd") or "/usr/sbin/sshd"
    if not os.path.exists(sshd):
        docker_unavailable("the ssh:// engine test needs OpenSSH's sshd (Debian: openssh-server)")
    directory = tmp_path / "sshd"
    ssh_dir = tmp_path / "home" / ".ssh"
    ssh_dir.mkdir(parents=True)
    directory.mkdir()
    for key in (directory / "host_key", ssh_dir / "id_ed25519"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    (directory / "authorized_keys").write_text((ssh_dir / "id_ed25519.pub").read_text())
    with socket.socket() as probe:  # a free port for sshd (it cannot report the one it got)
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    (directory / "sshd_config").write_text(
        f"ListenAddress 127.0.0.1\nPort {port}\nHostKey {directory / 'host_key'}\n"
        f"AuthorizedKeysFile {directory / 'authorized_keys'}\nPasswordAuthentication no\n"
        "KbdInteractiveAuthentication no\nPermitRootLogin prohibit-password\nUsePAM no\n"
        f"PidFile {directory / 'sshd.pid'}\nStrictModes no\n")
    host_key = " ".join((directory / "host_key.pub").read_text().split()[:2])
    (ssh_dir / "known_hosts").write_text(f"[127.0.0.1]:{port} {host_key}\n")
    (ssh_dir / "config").write_text(f"Host 127.0.0.1\n  IdentityFile {ssh_dir / 'id_ed25519'}\n")
    Path("/run/sshd").mkdir(exist_ok=True)  # privilege separation directory, when root
    server = subprocess.Popen([sshd, "-D", "-e", "-f", str(directory / "sshd_config")],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + SSHD_START_TIMEOUT_S
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            if server.poll() is not None or time.monotonic() > deadline:
                server.kill()
                docker_unavailable(f"sshd did not start: {server.stderr.read().decode(errors='replace')[-300:]}")
            time.sleep(0.05)
    environ = {k: v for k, v in os.environ.items() if not k.startswith("DOCKER_")}
    environ.update(HOME=str(tmp_path / "home"), DOCKER_HOST=f"ssh://{getpass.getuser()}@127.0.0.1:{port}")
    monkeypatch.setenv("HOME", environ["HOME"])
    yield environ
    server.terminate()
    server.wait()


class _Forwarder:
    """Accepts on 127.0.0.1:<ephemeral> and pipes each connection to a unix socket."""

    def __init__(self, unix_path: str) -> None:
        self._unix_path = unix_path
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._closed = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # listener closed
            upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            upstream.connect(self._unix_path)
            _Pair(client, upstream)

    def close(self) -> None:
        self._closed.set()
        self._listener.close()


class _Pair:
    """Two sockets piped both ways; each direction's end is passed on as a
    half-close (an exec's output ends that way), and both close when both end."""

    def __init__(self, left: socket.socket, right: socket.socket) -> None:
        self._sockets = (left, right)
        self._running = 2
        self._lock = threading.Lock()
        for source, sink in ((left, right), (right, left)):
            threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65_536):
                sink.sendall(data)
            sink.shutdown(socket.SHUT_WR)
        except OSError:
            # A side hung up or reset: wake the other pump so the pair ends.
            for sock in self._sockets:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
        with self._lock:
            self._running -= 1
            done = self._running == 0
        if done:
            for sock in self._sockets:
                sock.close()


@pytest.fixture(params=["local", pytest.param("docker", marks=pytest.mark.docker)])
def sandbox(request) -> str:
    """Run the test on each workspace backend; docker needs the engine (a failure in CI if absent)."""
    if request.param == "docker":
        request.getfixturevalue("docker_engine")
    return request.param


def running_research_containers(workspace_under: Path | None = None) -> list[str]:
    """Ids of the research containers running right now; with `workspace_under`,
    only those whose bind-mounted workspace lies below it (this test's, not
    another program's on the same engine)."""
    import docker

    from sandbox.docker_container import LABEL_RUN

    client = docker.from_env()
    try:
        running = client.containers.list(filters={"label": LABEL_RUN})
    finally:
        client.close()
    if workspace_under is not None:
        running = [container for container in running
                   if any(Path(mount.get("Source") or "/").is_relative_to(workspace_under)
                          for mount in container.attrs["Mounts"])]
    return sorted(container.id for container in running)


class ContainerWatch:
    """What research containers of a test were running each time the model was
    asked: proof that a `--sandbox docker` run really ran its tools in a container."""

    def __init__(self, server, workspace_under: Path) -> None:
        self.seen: list[list[str]] = []
        server.on_request = lambda: self.seen.append(running_research_containers(workspace_under))

    def assert_one_container_throughout(self) -> None:
        assert self.seen, "the model was never asked"
        assert all(len(running) == 1 for running in self.seen), self.seen
        assert len({running[0] for running in self.seen}) == 1, self.seen


@pytest.fixture
def sandbox_watch(sandbox, scripted_model, tmp_path):
    """For a test run on each backend (`sandbox`) whose workspaces live under its
    tmp_path: on docker, a ContainerWatch on the scripted model, checked after
    the test; on local, nothing to watch."""
    if sandbox != "docker":
        yield None
        return
    watch = ContainerWatch(scripted_model, tmp_path)
    yield watch
    watch.assert_one_container_throughout()
