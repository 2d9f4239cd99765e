"""`research sandbox build|status|prune`: the sandbox image and leftover containers.

dispatcher/cli.py calls these and prints what they return; they know nothing
of the terminal beyond an optional `progress(line)` callback.
"""

from __future__ import annotations

import io
import os
from collections.abc import Callable, Mapping

from dispatcher.errors import SandboxError
from sandbox.checkup import Check, Checkup
from sandbox.docker_container import hardening_summary, reap
from sandbox.docker_engine import (
    connect,
    describe_engine,
    engine_errors,
    image_name,
    reason,
    translated,
    uses_bind_mount,
)

# A base image that scripts/setup-docker.sh imports from debootstrap; when the
# engine has it, the build needs no registry and runs with its network off.
OFFLINE_BASE_IMAGE = "research-sandbox-base:bookworm"
# Building from a stock base downloads packages: allow it time.
BUILD_TIMEOUT_S = 1_800


def dockerfile_text() -> str:
    from importlib.resources import files

    return files("sandbox").joinpath("Dockerfile").read_text(encoding="utf-8")


def build_image(settings, progress: Callable[[str], None] | None = None,
                environ: Mapping[str, str] = os.environ, base: str | None = None) -> str:
    """Build sandbox/Dockerfile as the configured image; returns a one-line summary.

    The base is `base`, else the offline base when the engine has it, else the
    Dockerfile's own default (debian:bookworm-slim, pulled from a registry).
    """
    client = connect(environ, timeout_s=BUILD_TIMEOUT_S)
    try:
        tag = image_name(settings)
        if base is None and _has_image(client, OFFLINE_BASE_IMAGE):
            base = OFFLINE_BASE_IMAGE
        offline = base == OFFLINE_BASE_IMAGE
        buildargs = {"BASE": base} if base else {}
        say = progress or (lambda line: None)
        say(f"building {tag} from {base or 'the Dockerfile default base'}"
            + (" with the network off" if offline else ""))
        with translated(f"build {tag}"):
            events = client.api.build(
                fileobj=io.BytesIO(dockerfile_text().encode()), tag=tag, buildargs=buildargs, rm=True,
                forcerm=True, decode=True, network_mode="none" if offline else None,
                labels={"research.sandbox": "1"},
            )
            for event in events:
                if "error" in event:
                    detail = event.get("errorDetail", {}).get("message") or event["error"]
                    hint = "" if base else (f"; without a registry, import a base as {OFFLINE_BASE_IMAGE} first "
                                            "(scripts/setup-docker.sh in the source tree does it with debootstrap)")
                    raise SandboxError(f"building {tag} failed: {' '.join(str(detail).split())}{hint}")
                line = str(event.get("stream", "")).strip()
                if line:
                    say(line)
            image = client.images.get(tag)
        return f"built {tag} ({image.short_id.removeprefix('sha256:')})"
    finally:
        client.close()


def sandbox_status(settings, environ: Mapping[str, str] = os.environ) -> Checkup:
    """Whether the engine answers, whether the image exists, and the hardening
    every sandbox container gets; the engine and image checks fail when a run could not start."""
    bind = uses_bind_mount(settings, environ)
    checks: list[Check | str] = []
    tag = image_name(settings)
    try:
        client = connect(environ)
    except SandboxError as exc:
        checks.append(Check("engine", f"engine: not reachable ({exc})", ok=False))
        checks.append(Check("image", f"image: {tag} (unknown without an engine)", ok=False))
    else:
        try:
            checks.append(Check("engine", f"engine: reachable at {describe_engine(environ)}, {engine_version(client)}"))
            state, present = image_state(client, tag)
            checks.append(Check("image", f"image: {state}", ok=present))
        finally:
            client.close()
    transfer = "bind-mounted from the host" if bind else "copied into the container and back (remote engine)"
    checks.append(f"workspace: {transfer}")
    checks.append("hardening (every container):")
    checks.extend(f"  {line}" for line in hardening_summary(settings, bind_mount=bind))
    return Checkup.of(checks)


def prune_containers(settings, environ: Mapping[str, str] = os.environ) -> int:
    """Remove the containers of runs that are gone (killed, or kept with
    --no-cleanup and done with); returns how many were removed. Runs of other
    hosts sharing the engine count as gone once a day old."""
    client = connect(environ)
    try:
        with translated("list sandbox containers"):
            return reap(client, min_age_s=0, remove_foreign=True)
    finally:
        client.close()


def _has_image(client, tag: str) -> bool:
    import docker

    try:
        client.images.get(tag)
    except docker.errors.ImageNotFound:
        return False
    return True


def image_state(client, tag: str) -> tuple[str, bool]:
    """What the engine has under `tag`, and whether it is there."""
    import docker

    try:
        image = client.images.get(tag)
    except docker.errors.ImageNotFound:
        return f"{tag} is missing; build it with `research sandbox build`", False
    except engine_errors() as exc:
        return f"{tag} could not be looked up ({reason(exc)})", False
    size_mb = image.attrs.get("Size", 0) / 1_000_000
    return f"{tag} present ({image.short_id.removeprefix('sha256:')}, {size_mb:.0f} MB)", True


def engine_version(client) -> str:
    try:
        version = client.version()
    except engine_errors() as exc:
        return f"version unknown ({reason(exc)})"
    return f"Docker {version.get('Version', '?')} (API {version.get('ApiVersion', '?')})"
