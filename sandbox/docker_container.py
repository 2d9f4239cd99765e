"""The sandbox container: its hardened configuration, its labels, and reaping.

Everything that makes the container a sandbox is decided in `create_kwargs`,
in one place, so `research sandbox status` can show it and the tests can check
it against `docker inspect`. Defaults are locked down; nothing here loosens them.

Every container carries labels naming the run that made it (an id, the host,
the pid and that process's start time), so a later run or `research sandbox
prune` can tell a container whose run is gone from one still in use.
"""

from __future__ import annotations

import logging
import os
import socket
import time
import uuid
from collections.abc import Mapping
from pathlib import Path

import attrs

from sandbox.docker_engine import engine_errors, reason

LABEL_RUN = "research.run"
LABEL_MODE = "research.mode"
LABEL_HOST = "research.host"
LABEL_PID = "research.pid"
LABEL_PID_START = "research.pid-start"

WORKSPACE_PATH = "/workspace"
# The user sandbox/Dockerfile creates; used whenever the host user is root
# (root in the container is never an option) and on remote engines.
SANDBOX_UID = 10001
SANDBOX_GID = 10001
CONTAINER_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# Not a real directory: tools find no dotfiles of anyone's there.
CONTAINER_HOME = "/nonexistent"
_log = logging.getLogger(__name__)

# Containers whose run is gone are reaped by later runs once they are this old.
STALE_AFTER_S = 86_400


@attrs.frozen
class RunIdentity:
    """Who a container belongs to: enough to tell later whether that run still lives."""

    run_id: str
    mode: str
    host: str
    pid: int
    pid_start: str

    @classmethod
    def current(cls, mode: str) -> "RunIdentity":
        pid = os.getpid()
        return cls(run_id=uuid.uuid4().hex[:12], mode=mode, host=socket.gethostname(), pid=pid,
                   pid_start=_process_start(pid))

    def labels(self) -> dict[str, str]:
        return {
            LABEL_RUN: self.run_id,
            LABEL_MODE: self.mode,
            LABEL_HOST: self.host,
            LABEL_PID: str(self.pid),
            LABEL_PID_START: self.pid_start,
        }

    @property
    def container_name(self) -> str:
        return f"research-{self.mode}-{self.run_id}"


def container_environment() -> dict[str, str]:
    """The container's whole environment: built, never copied from the host."""
    return {"PATH": CONTAINER_PATH, "HOME": CONTAINER_HOME, "LANG": "C.UTF-8"}


def create_kwargs(settings, image: str, identity: RunIdentity, *, user: str,
                  bind_source: Path | None) -> dict:
    """Arguments for `client.containers.create`: the sandbox's whole configuration.

    `bind_source` is the host workspace to bind-mount at /workspace; None gives
    the container an anonymous volume there instead, filled by copying.
    """
    from docker.types import Mount

    if bind_source is not None:
        workspace = Mount(target=WORKSPACE_PATH, source=str(bind_source), type="bind")
    else:
        workspace = Mount(target=WORKSPACE_PATH, source=None, type="volume")
    return dict(
        image=image,
        name=identity.container_name,
        labels=identity.labels(),
        # tini as pid 1 reaps orphans: without it, zombies left by a killed
        # command would fill pids_limit and the workspace would stop answering.
        init=True,
        user=user,
        working_dir=WORKSPACE_PATH,
        environment=container_environment(),
        hostname="sandbox",
        network_mode="none",
        read_only=True,
        tmpfs={"/tmp": f"rw,nosuid,nodev,noexec,size={settings.tmp_size}"},
        mounts=[workspace],
        cap_drop=["ALL"],
        security_opt=["no-new-privileges:true"],
        privileged=False,
        pid_mode=None,
        ipc_mode="private",
        pids_limit=settings.pids_limit,
        mem_limit=settings.memory,
        # Equal to mem_limit: no swap on top, so the memory limit is the limit.
        memswap_limit=settings.memory,
        nano_cpus=int(settings.cpus * 1e9),
        # The main process only keeps the container alive; it never logs.
        log_config={"type": "none", "config": {}},
    )


def hardening_summary(settings, *, bind_mount: bool) -> list[str]:
    """One line per protection a sandbox container gets, for `sandbox status`."""
    workspace = "the host workspace bind-mounted" if bind_mount else "a volume the workspace is copied into"
    return [
        "network: none (no interfaces but loopback; clone and fetch happen on the host)",
        f"root filesystem: read-only; /tmp a {settings.tmp_size} tmpfs (noexec, nosuid, nodev)",
        f"/workspace: {workspace}; no other host path, no Docker socket",
        "capabilities: all dropped; no-new-privileges; not privileged",
        f"user: non-root (uid {SANDBOX_UID}, or your own uid when you are not root)",
        f"limits: {settings.pids_limit} processes, {settings.memory} memory (no swap), {settings.cpus:g} CPUs",
        "namespaces: private pid and ipc; no published ports",
        "environment: PATH, HOME and LANG only (no host variable, key or token)",
        f"each command: killed after its timeout (at most {settings.exec_timeout_s} s)",
    ]


def run_is_gone(labels: Mapping[str, str], *, host: str | None = None) -> bool:
    """Whether the run that labelled a container has ended, as far as this host can tell.

    A run on another host (a shared remote engine) cannot be checked: it counts
    as alive, and only its age (see `reap`) lets it go.
    """
    host = socket.gethostname() if host is None else host
    if labels.get(LABEL_HOST) != host:
        return False
    try:
        pid = int(labels.get(LABEL_PID, ""))
    except ValueError:
        return True  # unreadable labels: nothing can still own it
    if pid <= 0 or not _pid_exists(pid):
        return True
    # The pid may have been reused by an unrelated process since.
    return _process_start(pid) != labels.get(LABEL_PID_START, "")


def research_containers(client) -> list:
    """Every container (running or not) that a research run created."""
    return client.containers.list(all=True, filters={"label": LABEL_RUN})


def reap(client, *, min_age_s: float, remove_foreign: bool = False) -> int:
    """Remove containers whose run is gone and that are at least `min_age_s` old.

    With `remove_foreign`, containers of other hosts older than STALE_AFTER_S
    go too. Returns how many were removed; one that cannot be removed is
    left for the next attempt.
    """
    import docker

    host = socket.gethostname()
    now = time.time()
    removed = 0
    for container in research_containers(client):
        labels = container.labels
        age = now - _created_at(container)
        gone = run_is_gone(labels, host=host)
        if remove_foreign and labels.get(LABEL_HOST) != host and age >= STALE_AFTER_S:
            gone = True
        if not gone or age < min_age_s:
            continue
        try:
            container.remove(force=True, v=True)
        except docker.errors.NotFound:
            continue  # another run reaped it first
        except engine_errors() as exc:
            # Reaping is housekeeping: a run must not fail because an old container resists.
            _log.warning("could not remove stale container %s: %s", container.short_id, reason(exc))
            continue
        removed += 1
    return removed


def _created_at(container) -> float:
    from datetime import datetime

    created = container.attrs.get("Created", "")
    # Docker prints nanoseconds ("2024-05-01T10:00:00.123456789Z"); Python takes microseconds.
    head, _, fraction = created.rstrip("Z").partition(".")
    try:
        stamp = datetime.fromisoformat(head + "+00:00").timestamp()
    except ValueError:
        return 0.0  # unknown age: treat as old
    return stamp + float(f"0.{fraction[:6] or 0}")


def _pid_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else
    return True


def _process_start(pid: int) -> str:
    """The process's start time in clock ticks since boot ('' where /proc has none)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    # Field 22, counted after the parenthesised command name (which may hold spaces).
    fields = stat.rpartition(")")[2].split()
    return fields[19] if len(fields) > 19 else ""
