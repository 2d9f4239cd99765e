"""`research doctor`: can this machine run research? git, ripgrep, Docker, the model's key."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping

from dispatcher.errors import ResearchError, SandboxError
from sandbox.checkup import Check, Checkup
from sandbox.environment import tool_path

VERSION_TIMEOUT_S = 10


def doctor_report(config, environ: Mapping[str, str] = os.environ) -> Checkup:
    """One line per check, each saying what was found or what to do. Docker
    fails the checkup only when the configured backend needs it."""
    return Checkup.of([
        _program("git", "git", "install git (e.g. apt-get install git)", path=environ.get("PATH")),
        _program("ripgrep", "rg", "reinstall research (it depends on the ripgrep wheel)", path=tool_path()),
        *_docker(config, environ),
        _model(config, environ),
    ])


def _program(label: str, name: str, fix: str, path: str | None) -> Check:
    executable = shutil.which(name, path=path)
    if executable is None:
        return Check(label, f"{label}: missing; {fix}", ok=False)
    try:
        version = subprocess.run([executable, "--version"], capture_output=True, text=True,
                                 timeout=VERSION_TIMEOUT_S, stdin=subprocess.DEVNULL).stdout
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Check(label, f"{label}: {executable} does not run ({exc})", ok=False)
    first = version.strip().splitlines()[0] if version.strip() else "version unknown"
    return Check(label, f"{label}: {first} ({executable})")


def _docker(config, environ: Mapping[str, str]) -> list[Check]:
    from sandbox.docker_admin import engine_version, image_state
    from sandbox.docker_engine import connect, describe_engine, image_name

    required = config.sandbox.backend == "docker"
    needed = "needed" if required else "needed only for --sandbox docker"
    try:
        client = connect(environ)
    except SandboxError as exc:
        return [Check("docker", f"docker: not reachable ({needed}): {exc}", ok=not required)]
    try:
        state, present = image_state(client, image_name(config.sandbox))
        return [
            Check("docker", f"docker: engine reachable at {describe_engine(environ)}, {engine_version(client)}"),
            Check("sandbox image", f"sandbox image: {state}", ok=present or not required),
        ]
    finally:
        client.close()


def _model(config, environ: Mapping[str, str]) -> Check:
    from config.models import mode_model_name, resolve_model

    name = mode_model_name(config, "repo")
    try:
        spec = resolve_model(name, config, environ)
    except ResearchError as exc:
        return Check("model", f"model: {name}: {exc}", ok=False)
    # Never print the key itself, only whether there is one.
    if spec.api_key:
        return Check("model", f"model: {name} -> {spec.litellm_model}, key found (from the configuration)")
    missing = _missing_provider_variables(spec, environ)
    if missing:
        return Check("model", f"model: {name} -> {spec.litellm_model}, no key: set {' or '.join(missing)} "
                              f"or api_key in [models.<alias>]", ok=False)
    return Check("model", f"model: {name} -> {spec.litellm_model}, key found (from the environment)")


def _missing_provider_variables(spec, environ: Mapping[str, str]) -> list[str]:
    """The environment variables litellm wants for this provider and `environ` lacks."""
    from dispatcher.model import load_litellm

    litellm = load_litellm()
    try:
        wanted = litellm.validate_environment(spec.litellm_model, api_base=spec.api_base)["missing_keys"]
    except Exception:  # litellm does not know the provider: nothing to check, the call will tell
        return []
    # litellm looks in os.environ only; the caller's environment is what a run would see.
    return [name for name in wanted if not environ.get(name)]
