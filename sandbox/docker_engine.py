"""Connecting to the Docker engine, and turning its failures into one sentence.

The engine is whatever the SDK's `docker.from_env` finds, exactly as the docker
CLI would: `DOCKER_HOST` (unix://, tcp:// or ssh://), `DOCKER_TLS_VERIFY` and
`DOCKER_CERT_PATH` are honoured, and without them the local socket is used.
A local socket lets the workspace be bind-mounted; any other address means the
engine may be on another machine, so the workspace is copied in and out instead.

Docker and requests errors enter our code here and leave as SandboxError.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping

from dispatcher.errors import SandboxError

DEFAULT_ENGINE_ADDRESS = "unix:///var/run/docker.sock"
# Seconds one API call (not a tool command: those have their own deadline) may take.
API_TIMEOUT_S = 60
IMAGE_REPOSITORY = "research-sandbox"
_LOCAL_SCHEMES = ("unix://", "npipe://")
# Over ssh:// the SDK (through paramiko) carries every HTTP connection, and
# every command server's attached stream, as a session of one SSH connection,
# and sshd allows 10 sessions a connection (MaxSessions). Its connection pools
# are kept per request URL (9 of them by default, each holding idle sessions),
# so these keep a run within that: 2 pools of 1 idle connection, 4 servers,
# and one plain exec at a time (two sessions) for calls beyond the servers.
SSH_CLIENT_OPTIONS = {"num_pools": 2, "max_pool_size": 1}
SSH_CHANNEL_LIMITS = {"max_channels": 4, "max_parallel_execs": 1}


def project_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("research")
    except PackageNotFoundError:  # running from a source tree that was never installed
        return "dev"


def image_name(settings) -> str:
    """The image a run uses: `[sandbox] image`, or research-sandbox:<project version>."""
    return settings.image or f"{IMAGE_REPOSITORY}:{project_version()}"


def engine_address(environ: Mapping[str, str] = os.environ) -> str:
    return environ.get("DOCKER_HOST") or DEFAULT_ENGINE_ADDRESS


def describe_engine(environ: Mapping[str, str] = os.environ) -> str:
    """Where we look for the engine, naming DOCKER_HOST either way."""
    if environ.get("DOCKER_HOST"):
        return f"{environ['DOCKER_HOST']} (from DOCKER_HOST)"
    return f"{DEFAULT_ENGINE_ADDRESS} (DOCKER_HOST is not set)"


def uses_bind_mount(settings, environ: Mapping[str, str] = os.environ) -> bool:
    """Whether the host workspace directory can be bind-mounted into the container.

    Only an engine behind a local socket shares our filesystem; over tcp:// or
    ssh:// a bind mount would name a directory on the engine's machine.
    `[sandbox] transfer` forces either way (e.g. a tcp:// engine on this host).
    """
    if settings.transfer != "auto":
        return settings.transfer == "bind"
    address = engine_address(environ)
    return address.startswith(_LOCAL_SCHEMES) or address.startswith("/")


def connect(environ: Mapping[str, str] = os.environ, timeout_s: float = API_TIMEOUT_S):
    """A DockerClient that has answered a ping; SandboxError naming the address otherwise."""
    import docker

    try:
        if over_ssh(environ):
            client = docker.DockerClient(**docker.utils.kwargs_from_env(environment=dict(environ)),
                                         timeout=timeout_s, **SSH_CLIENT_OPTIONS)
        else:
            client = docker.from_env(environment=dict(environ), timeout=timeout_s)
    except (*engine_errors(), OSError) as exc:  # over ssh://, the SSH connection is made here
        raise _unreachable(environ, exc) from exc
    try:
        client.ping()
    except engine_errors() as exc:
        client.close()
        raise _unreachable(environ, exc) from exc
    return client


def over_ssh(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether the engine is reached through SSH (DOCKER_HOST=ssh://...)."""
    return engine_address(environ).startswith("ssh://")


def engine_errors() -> tuple[type[BaseException], ...]:
    """What a Docker SDK call raises when the engine fails or cannot be reached."""
    import docker
    import paramiko
    import requests

    return (docker.errors.DockerException, requests.exceptions.RequestException, paramiko.SSHException)


@contextlib.contextmanager
def translated(action: str) -> Iterator[None]:
    """Turn a Docker SDK failure inside the block into SandboxError("cannot <action>: why")."""
    try:
        yield
    except engine_errors() as exc:
        raise SandboxError(f"cannot {action}: {reason(exc)}") from exc


def require_image(client, tag: str):
    """The image `tag` on the engine, or SandboxError saying how to build it."""
    import docker

    try:
        return client.images.get(tag)
    except docker.errors.ImageNotFound as exc:
        raise SandboxError(
            f"the sandbox image {tag} is not on the Docker engine; build it with `research sandbox build`"
        ) from exc
    except engine_errors() as exc:
        raise SandboxError(f"cannot look up the sandbox image {tag}: {reason(exc)}") from exc


def reason(exc: BaseException) -> str:
    """The most specific short explanation in `exc` or the errors it was raised from."""
    import docker

    if isinstance(exc, docker.errors.APIError) and exc.explanation:
        return _one_line(str(exc.explanation))
    # Connection failures arrive wrapped three deep (DockerException <- requests
    # <- urllib3 <- OSError); the OSError's own words are the useful part.
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError) and current.strerror:
            return current.strerror
        for arg in getattr(current, "args", ()):
            if isinstance(arg, OSError) and arg.strerror:
                return arg.strerror
        current = current.__cause__ or current.__context__
    return _one_line(str(exc)) or type(exc).__name__


def _unreachable(environ: Mapping[str, str], exc: BaseException) -> SandboxError:
    return SandboxError(
        f"cannot reach the Docker engine at {describe_engine(environ)}: {reason(exc)}; "
        "start the engine or point DOCKER_HOST at one"
    )


def _one_line(text: str) -> str:
    return " ".join(text.split())
