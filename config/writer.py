"""`research config show|set|init`: reading and writing the file safely.

Writes are validated as a whole before anything touches the disk, and land
atomically (a temp file renamed over the old one) with mode 0600, since the
file may hold API keys. `set` edits the file with tomlkit, so the user's
comments, order and formatting survive it.
"""

from __future__ import annotations

import os
import tempfile
import tomllib
from pathlib import Path
from typing import Any

import attrs
import tomli_w
import tomlkit
from tomlkit.exceptions import TOMLKitError

from config.loader import config_from_mapping, parse_toml
from config.schema import Config
from config.secrets import is_reference
from dispatcher.errors import ConfigError

MASK = "***"

STARTER = '''\
# research configuration. Every key is optional; these are the defaults.
# Docs: research --help, and the README's "Configuration" section.

[defaults]
# An alias from [models] below, a litellm model string, or provider:model.
model = "anthropic/claude-sonnet-4-5"
max_steps = 25
cleanup = true
sandbox = "local"        # or "docker" (see: research sandbox status)

[repo]
depth = 1                # history of a shallow clone; --full for everything
git_timeout_s = 120

[web]
search = "duckduckgo"    # duckduckgo, searxng, brave, tavily, exa, kagi
allowed_hosts = []       # "host" or "host:port" exempt from the private-network guard
allow_private_networks = false

# [web.searxng]
# url = "http://localhost:8888"

# [web.brave]
# api_key = "$BRAVE_API_KEY"      # $VAR, !command, an env var name, or the key

# [models.local]
# model = "openai/qwen2.5-coder"
# api_base = "http://localhost:8000/v1"
# api_key = "!pass show llm/local"
# context_window = 32768
'''


def show_config(config: Config) -> str:
    """The effective configuration as TOML, with literal secrets masked."""
    document = _plain(attrs.asdict(config, recurse=True))
    for alias in document.get("models", {}).values():
        if "api_key" in alias:
            alias["api_key"] = _masked(alias["api_key"])
        if "extra_headers" in alias:
            alias["extra_headers"] = {name: _masked(value) for name, value in alias["extra_headers"].items()}
    for provider in ("brave", "tavily", "exa", "kagi"):
        table = document.get("web", {}).get(provider, {})
        if "api_key" in table:
            table["api_key"] = _masked(table["api_key"])
    return tomli_w.dumps(document)


def set_value(path: Path, dotted_key: str, raw_value: str) -> None:
    """Set `dotted_key` (e.g. defaults.max_steps) to `raw_value`, validating the whole file first."""
    keys = [part for part in dotted_key.split(".")]
    if not dotted_key or any(not part for part in keys) or len(keys) < 2:
        raise ConfigError(f"{dotted_key!r} is not a dotted key like defaults.model or models.NAME.model")
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    # Problems already in the file are reported with their real line numbers...
    config_from_mapping(parse_toml(text, path), path, text)
    try:
        document = tomlkit.parse(text)
    except TOMLKitError as exc:  # tomllib accepted it, so this is tomlkit's own limit
        raise ConfigError(f"{path}: cannot edit this file in place ({exc}); edit it by hand") from None
    table = document
    for part in keys[:-1]:
        if part not in table:
            table[part] = tomlkit.table()
        table = table[part]
        if not isinstance(table, dict):
            raise ConfigError(f"{path}: {part!r} in {dotted_key!r} is a value, not a table")
    if isinstance(table.get(keys[-1]), dict):
        raise ConfigError(f"{dotted_key!r} is a table; set one of its keys instead")
    table[keys[-1]] = _parse_value(raw_value)
    # ...and the new value's problems by key alone: its line does not exist yet.
    config_from_mapping(document.unwrap(), path)
    _write_atomically(path, tomlkit.dumps(document))


def init_config(path: Path, force: bool = False) -> None:
    """Write the commented starter file; an existing file is kept unless `force`."""
    if path.exists() and not force:
        raise ConfigError(f"{path} already exists; pass --force to overwrite it")
    _write_atomically(path, STARTER)


def _parse_value(raw: str) -> Any:
    """A TOML value when `raw` is one (10, true, ["a"], "x"), else the plain string."""
    try:
        return tomllib.loads(f"value = {raw}")["value"]
    except tomllib.TOMLDecodeError:
        return raw


def _write_atomically(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor, temporary = tempfile.mkstemp(prefix=".config-", suffix=".toml", dir=path.parent)
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(temporary, 0o600)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def _plain(value: Any) -> Any:
    """attrs.asdict output made TOML-writable: no None, tuples as lists."""
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items() if item is not None and item != {}}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    return value


def _masked(value: str) -> str:
    return value if is_reference(value) or _is_env_name(value) else MASK


def _is_env_name(value: str) -> bool:
    return value.isidentifier() and value.upper() == value
