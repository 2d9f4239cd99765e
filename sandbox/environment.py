"""The environment a tool subprocess sees: an allowlist, never the host's.

The model may be prompt-injected, so anything a tool runs must not be able to
print an API key, token or cloud credential the host happens to hold. We build
the environment from scratch instead of deleting known-bad names from a copy.
"""

from __future__ import annotations

import os
import sysconfig
from collections.abc import Mapping

# Enough for git, ripgrep and coreutils to behave; nothing that carries a secret.
_PASSED_THROUGH = ("LANG", "LC_ALL", "TZ")

# Git must not read the host's config (credential helpers, aliases, hooks) nor
# prompt on a terminal; options never come from the model, so these stay fixed.
GIT_ENVIRONMENT = {
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_TERMINAL_PROMPT": "0",
    "GIT_PAGER": "cat",
    "PAGER": "cat",
    "GIT_OPTIONAL_LOCKS": "0",
    "GIT_ASKPASS": "/bin/false",
    "SSH_ASKPASS": "/bin/false",
}


def tool_path() -> str:
    """PATH for tool subprocesses: the system directories plus this install's
    scripts directory, where the `ripgrep` wheel puts `rg`."""
    scripts = sysconfig.get_path("scripts")
    system = ["/usr/local/bin", "/usr/bin", "/bin"]
    return os.pathsep.join([scripts, *system])


def scrubbed_environment(
    home: str, extra: Mapping[str, str] | None = None, source: Mapping[str, str] | None = None
) -> dict[str, str]:
    """A fresh environment for a tool subprocess.

    `home` becomes HOME (a directory holding no dotfiles of the user's);
    `source` defaults to os.environ and is only consulted for the locale
    variables in the allowlist.
    """
    source = os.environ if source is None else source
    env = {name: source[name] for name in _PASSED_THROUGH if name in source}
    env.setdefault("LANG", "C.UTF-8")
    env.update(GIT_ENVIRONMENT)
    env["PATH"] = tool_path()
    env["HOME"] = home
    env.update(extra or {})
    return env
