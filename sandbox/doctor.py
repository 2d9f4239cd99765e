"""`research doctor`: can this machine run research? git, ripgrep, Docker, the model's key."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping

from dispatcher.errors import ResearchError, SandboxError
from sandbox.environment import tool_path

VERSION_TIMEOUT_S = 10


def doctor_report(config, environ: Mapping[str, str] = os.environ) -> str:
    """One line per check, each saying what was found or what to do."""
    return "\n".join([
        _program("git", "git", "install git (e.g. apt-get install git)", path=environ.get("PATH")),
        _program("ripgrep", "rg", "reinstall research (it depends on the ripgrep wheel)", path=tool_path()),
        *_docker(config, environ),
        _model(config, environ),
    ])


def _program(label: str, name: str, fix: str, path: str | None) -> str:
    executable = shutil.which(name, path=path)
    if executable is None:
        return f"{label}: missing; {fix}"
    try:
        version = subprocess.run([executable, "--version"], capture_output=True, text=True,
                                 timeout=VERSION_TIMEOUT_S, stdin=subprocess.DEVNULL).stdout
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{label}: {executable} does not run ({exc})"
    first = version.strip().splitlines()[0] if version.strip() else "version unknown"
    return f"{label}: {first} ({executable})"


def _docker(config, environ: Mapping[str, str]) -> list[str]:
    from sandbox.docker_admin import _engine_version, _image_state
    from sandbox.docker_engine import connect, describe_engine, image_name

    needed = "needed" if config.sandbox.backend == "docker" else "needed only for --sandbox docker"
    try:
        client = connect(environ)
    except SandboxError as exc:
        return [f"docker: not reachable ({needed}): {exc}"]
    try:
        return [
            f"docker: engine reachable at {describe_engine(environ)}, {_engine_version(client)}",
            f"sandbox image: {_image_state(client, image_name(config.sandbox))}",
        ]
    finally:
        client.close()


def _model(config, environ: Mapping[str, str]) -> str:
    from config.models import mode_model_name, resolve_model

    name = mode_model_name(config, "repo")
    try:
        spec = resolve_model(name, config, environ)
    except ResearchError as exc:
        return f"model: {name}: {exc}"
    # Never print the key itself, only whether there is one.
    if spec.api_key:
        return f"model: {name} -> {spec.litellm_model}, key found (from the configuration)"
    missing = _missing_provider_variables(spec)
    if missing:
        return (f"model: {name} -> {spec.litellm_model}, no key: set {' or '.join(missing)} "
                f"or api_key in [models.<alias>]")
    return f"model: {name} -> {spec.litellm_model}, key found (from the environment)"


def _missing_provider_variables(spec) -> list[str]:
    """The environment variables litellm wants for this provider and does not find."""
    from dispatcher.model import load_litellm

    litellm = load_litellm()
    try:
        return list(litellm.validate_environment(spec.litellm_model, api_base=spec.api_base)["missing_keys"])
    except Exception:  # litellm does not know the provider: nothing to check, the call will tell
        return []
