"""Resolving secret references in the configuration (api_key, header values).

    "$VAR" or "${VAR}"   the environment variable VAR (it must be set)
    "!command"           the command's trimmed stdout (run with /bin/sh)
    "NAME"               the variable NAME, when such a variable is set
    anything else        the literal value

Secrets are resolved when a run needs them, never echoed in messages.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Mapping

from dispatcher.errors import ConfigError

SECRET_COMMAND_TIMEOUT_S = 10
_VARIABLE = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def resolve_secret(value: str | None, *, key: str, environ: Mapping[str, str]) -> str | None:
    """The secret `value` refers to; `key` (e.g. "models.sonnet.api_key") names it in errors."""
    if value is None:
        return None
    reference = _VARIABLE.fullmatch(value)
    if reference:
        name = reference.group(1) or reference.group(2)
        if name not in environ:
            raise ConfigError(f"{key} refers to ${name}, which is not set in the environment")
        return environ[name]
    if value.startswith("!"):
        return _command_output(value[1:].strip(), key, environ)
    if _ENV_NAME.fullmatch(value) and value in environ:
        return environ[value]
    return value


def is_reference(value: str) -> bool:
    """Whether `value` points at a secret rather than being one (safe to show)."""
    return bool(_VARIABLE.fullmatch(value)) or value.startswith("!")


def _command_output(command: str, key: str, environ: Mapping[str, str]) -> str:
    if not command:
        raise ConfigError(f"{key} has '!' but no command after it")
    try:
        completed = subprocess.run(["/bin/sh", "-c", command], env=dict(environ), capture_output=True,
                                   text=True, timeout=SECRET_COMMAND_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise ConfigError(f"the command for {key} took longer than {SECRET_COMMAND_TIMEOUT_S} s") from None
    if completed.returncode != 0:
        raise ConfigError(f"the command for {key} failed with exit code {completed.returncode}")
    secret = completed.stdout.strip()
    if not secret:
        raise ConfigError(f"the command for {key} printed nothing")
    return secret
