"""Finding, parsing and validating the configuration file.

Layers, each overriding the last: built-in defaults (config/schema.py) → the
file → the environment (RESEARCH_MODEL) → flags (applied by the CLI). Every
mistake in the file is a ConfigError naming the file, the line and the dotted
key, so the user can go straight to it.
"""

from __future__ import annotations

import difflib
import os
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from config.schema import Config, InvalidValue, ModelAlias
from dispatcher.errors import ConfigError

CONFIG_ENV = "RESEARCH_CONFIG"
MODEL_ENV = "RESEARCH_MODEL"
_SECTIONS = ("defaults", "repo", "web", "sandbox", "models")


def config_path(environ: Mapping[str, str] = os.environ) -> Path:
    """Where the configuration file is: $RESEARCH_CONFIG, else under XDG_CONFIG_HOME, else ~/.config."""
    if environ.get(CONFIG_ENV):
        return Path(environ[CONFIG_ENV]).expanduser()
    base = environ.get("XDG_CONFIG_HOME") or str(Path(environ.get("HOME") or Path.home()) / ".config")
    return Path(base).expanduser() / "research" / "config.toml"


def load_config(path: Path | None = None, environ: Mapping[str, str] = os.environ) -> Config:
    """The configuration from defaults, the file and the environment (flags come later)."""
    explicit = path is not None or bool(environ.get(CONFIG_ENV))
    path = path if path is not None else config_path(environ)
    if path.exists():
        config = config_from_text(_read(path), path)
    elif explicit:
        raise ConfigError(f"{path}: no such configuration file")
    else:
        config = Config()
    if environ.get(MODEL_ENV):
        config = attrs.evolve(config, defaults=attrs.evolve(config.defaults, model=environ[MODEL_ENV]))
    return config


def config_from_text(text: str, path: Path) -> Config:
    """Parse and validate one file's text."""
    return config_from_mapping(parse_toml(text, path), path, text)


def parse_toml(text: str, path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        message = str(exc)
        found = re.search(r"\(at line (\d+), column \d+\)", message)
        where = f"{path}:{found.group(1)}" if found else str(path)
        reason = re.sub(r"\s*\(at line \d+, column \d+\)", "", message)
        raise ConfigError(f"{where}: invalid TOML: {reason}") from None


def config_from_mapping(document: Mapping[str, Any], path: Path, text: str = "") -> Config:
    """Build a Config from a parsed TOML document, refusing anything unknown or mistyped."""
    locate = _Locator(path, text)
    _refuse_unknown(document, _SECTIONS, (), locate)
    sections = {name: _build(type(getattr(Config(), name)), document.get(name, {}), (name,), locate)
                for name in ("defaults", "repo", "web", "sandbox")}
    models = document.get("models", {})
    if not isinstance(models, dict):
        raise locate.error(("models",), "must be a table of [models.<alias>] tables")
    sections["models"] = {alias: _build(ModelAlias, table, ("models", alias), locate)
                          for alias, table in models.items()}
    return _reconcile_sandbox(Config(**sections), document, locate)


def _reconcile_sandbox(config: Config, document: Mapping[str, Any], locate: "_Locator") -> Config:
    """`[defaults] sandbox` and `[sandbox] backend` name the same setting; keep them in step."""
    in_defaults = "sandbox" in document.get("defaults", {})
    in_sandbox = "backend" in document.get("sandbox", {})
    if in_defaults and in_sandbox and config.defaults.sandbox != config.sandbox.backend:
        raise locate.error(("sandbox", "backend"),
                           f"is {config.sandbox.backend!r} but defaults.sandbox is {config.defaults.sandbox!r}; "
                           "set one of them")
    if in_defaults:
        return attrs.evolve(config, sandbox=attrs.evolve(config.sandbox, backend=config.defaults.sandbox))
    if in_sandbox:
        return attrs.evolve(config, defaults=attrs.evolve(config.defaults, sandbox=config.sandbox.backend))
    return config


def _build(cls: type, table: Any, where: tuple[str, ...], locate: "_Locator") -> Any:
    """An instance of the attrs class `cls` from `table`, checking one key at a time
    so that an error names the key that caused it."""
    if not isinstance(table, dict):
        raise locate.error(where, "must be a table")
    fields = attrs.fields_dict(cls)
    _refuse_unknown(table, tuple(fields), where, locate)
    values: dict[str, Any] = {}
    for name, value in table.items():
        field = fields[name]
        if attrs.has(_nested_class(cls, name)):
            values[name] = _build(_nested_class(cls, name), value, (*where, name), locate)
            continue
        if isinstance(value, bool) and "bool" not in str(field.type):
            raise locate.error((*where, name), f"must be {_expected(field)}, not {_shown(value)}")
        try:
            attrs.evolve(_blank(cls), **{name: value})
        except (TypeError, ValueError) as exc:
            raise locate.error((*where, name), _problem(field, value, exc)) from None
        values[name] = value
    if cls is ModelAlias and "model" not in values:
        raise locate.error((*where,), "needs a 'model' key naming a litellm model, e.g. model = \"openai/gpt-4o\"")
    try:
        return cls(**values)
    except (TypeError, ValueError) as exc:  # a cross-field rule; name the table
        raise locate.error(where, str(exc)) from None


def _nested_class(cls: type, name: str) -> type:
    default = attrs.fields_dict(cls)[name].default
    factory = getattr(default, "factory", None)
    return type(factory()) if factory is not None else type(None)


def _blank(cls: type) -> Any:
    return cls(model="x") if cls is ModelAlias else cls()


def _refuse_unknown(table: Mapping[str, Any], known: tuple[str, ...], where: tuple[str, ...],
                    locate: "_Locator") -> None:
    for key in table:
        if key not in known:
            close = difflib.get_close_matches(key, known, n=1)
            hint = f"(did you mean {'.'.join((*where, close[0]))!r}?)" if close else f"(known: {', '.join(known)})"
            raise locate.error((*where, key), hint, unknown=True)


def _problem(field: attrs.Attribute, value: Any, exc: Exception) -> str:
    args = exc.args
    if isinstance(exc, InvalidValue):
        return f"{exc}, not {_shown(value)}"
    if isinstance(exc, ValueError) and len(args) >= 3 and isinstance(args[2], (tuple, list, frozenset)):
        return f"must be one of {', '.join(map(str, args[2]))}, not {_shown(value)}"
    if isinstance(exc, ValueError) and "must be >" in str(exc):
        return f"must be greater than 0, not {_shown(value)}"
    return f"must be {_expected(field)}, not {_shown(value)}"


def _expected(field: attrs.Attribute) -> str:
    declared = str(field.type)
    for fragment, text in (("tuple[str", "a list of strings"), ("dict[str, str]", "a table of strings"),
                           ("bool", "true or false"), ("float", "a number"), ("int", "a whole number"),
                           ("str", "a string")):
        if fragment in declared:
            return text
    return "a valid value"


def _shown(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}"'
    return repr(value)


class _Locator:
    """Finds the line a dotted key stands on, so errors can point at it."""

    def __init__(self, path: Path, text: str) -> None:
        self.path = path
        self.lines = text.splitlines()

    def error(self, where: tuple[str, ...], problem: str, unknown: bool = False) -> ConfigError:
        line = self.line_of(where)
        place = f"{self.path}:{line}" if line else str(self.path)
        if unknown:
            return ConfigError(f"{place}: unknown key {'.'.join(where)!r} {problem}")
        return ConfigError(f"{place}: {'.'.join(where)!r} {problem}")

    def line_of(self, where: tuple[str, ...]) -> int | None:
        table: tuple[str, ...] = ()
        for number, raw in enumerate(self.lines, 1):
            line = raw.split("#", 1)[0].strip()
            header = re.fullmatch(r"\[\[?\s*([^\]]+?)\s*\]\]?", line)
            if header:
                table = tuple(part.strip().strip('"\'') for part in header.group(1).split("."))
                if table == where:
                    return number
                continue
            assignment = re.match(r"([A-Za-z0-9_.\-\"' ]+?)\s*=", line)
            if assignment:
                key = tuple(part.strip().strip('"\'') for part in assignment.group(1).split("."))
                if (*table, *key) == where or (*table, *key)[: len(where)] == where:
                    return number
        return None


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not UTF-8 text") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read it ({exc.strerror})") from None
