"""The whole configuration as frozen attrs classes.

Each class mirrors one TOML table. Fields carry their default, a validator and
their help text (`metadata["help"]`), which `research config show` and the
README use. The classes do no I/O and never read the environment: the loader
builds them from a mapping and merges layers with `attrs.evolve`.
"""

from __future__ import annotations

import re
from typing import Any

import attrs
from attrs import validators as v

DEFAULT_MODEL = "anthropic/claude-sonnet-4-5"
DEFAULT_MAX_STEPS = 25
SANDBOX_BACKENDS = ("local", "docker")
SANDBOX_TRANSFERS = ("auto", "bind", "copy")
SEARCH_PROVIDERS = ("duckduckgo", "searxng", "brave", "tavily", "exa", "kagi")


def _help(text: str) -> dict[str, str]:
    return {"help": text}


_positive_int = [v.instance_of(int), v.gt(0)]
_optional_str = v.optional(v.instance_of(str))
_optional_positive_int = v.optional([v.instance_of(int), v.gt(0)])
_str_list = v.deep_iterable(v.instance_of(str), v.instance_of(tuple))


class InvalidValue(ValueError):
    """A validator's refusal whose text says what the value must be ("must be ...")."""


# Docker refuses a memory limit under 6 MB, and only when the container starts.
MIN_MEMORY_BYTES = 6 * 1024 * 1024
# Whole numbers only: the kernel's tmpfs takes "size=1.5m" for nothing.
_SIZE = re.compile(r"([0-9]+)([bkmg]?)", re.IGNORECASE)
_SIZE_UNITS = {"": 1, "b": 1, "k": 1024, "m": 1024**2, "g": 1024**3}


def size_bytes(text: str) -> int:
    """A size in Docker's notation ('512m', '2g', '1048576') in bytes; InvalidValue if it is not one."""
    match = _SIZE.fullmatch(text.strip()) if isinstance(text, str) else None
    if match is None:
        raise InvalidValue("must be a size such as \"512m\" or \"2g\" (units b, k, m, g)")
    return int(match[1]) * _SIZE_UNITS[match[2].lower()]


def _size_at_least(minimum: int, shown: str):
    def check(_instance, _attribute, value) -> None:
        if size_bytes(value) < minimum:
            raise InvalidValue(f"must be at least {shown}")
    return check


def _to_tuple(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


@attrs.frozen
class Defaults:
    model: str = attrs.field(default=DEFAULT_MODEL, validator=v.instance_of(str),
                             metadata=_help("Model alias from [models], litellm model string, or provider:model."))
    max_steps: int = attrs.field(default=DEFAULT_MAX_STEPS, validator=_positive_int,
                                 metadata=_help("Model turns before the agent must answer."))
    cleanup: bool = attrs.field(default=True, validator=v.instance_of(bool),
                                metadata=_help("Remove the workspace after the run."))
    sandbox: str = attrs.field(default="local", validator=v.in_(SANDBOX_BACKENDS),
                               metadata=_help("Workspace backend: local or docker."))


@attrs.frozen
class RepoSettings:
    model: str | None = attrs.field(default=None, validator=_optional_str,
                                    metadata=_help("Model for repo mode, overriding [defaults] model."))
    depth: int = attrs.field(default=1, validator=_positive_int,
                             metadata=_help("History depth of a shallow clone."))
    git_timeout_s: int = attrs.field(default=120, validator=_positive_int,
                                     metadata=_help("Seconds a clone or fetch may take."))
    blob_limit: str = attrs.field(default="5m", validator=v.instance_of(str),
                                  metadata=_help("Blobs larger than this are not downloaded by a shallow clone."))


@attrs.frozen
class SearxngSettings:
    url: str | None = attrs.field(default=None, validator=_optional_str,
                                  metadata=_help("Base URL of a SearXNG instance with the JSON API enabled."))


@attrs.frozen
class KeyedSearchSettings:
    """A search API that needs a key (brave, tavily, exa, kagi)."""

    api_key: str | None = attrs.field(default=None, validator=_optional_str,
                                      metadata=_help("API key: $VAR, !command, an env var name, or the key."))
    url: str | None = attrs.field(default=None, validator=_optional_str,
                                  metadata=_help("Override the API endpoint (for proxies and tests)."))


@attrs.frozen
class WebSettings:
    model: str | None = attrs.field(default=None, validator=_optional_str,
                                    metadata=_help("Model for web mode, overriding [defaults] model."))
    search: str = attrs.field(default="duckduckgo", validator=v.in_(SEARCH_PROVIDERS),
                              metadata=_help("Search provider: " + ", ".join(SEARCH_PROVIDERS) + "."))
    allowed_hosts: tuple[str, ...] = attrs.field(default=(), converter=_to_tuple, validator=_str_list,
                                                 metadata=_help("Hosts (host or host:port) exempt from the private-network guard."))
    allow_private_networks: bool = attrs.field(default=False, validator=v.instance_of(bool),
                                               metadata=_help("Turn the private-network (SSRF) guard off."))
    fetch_timeout_s: float = attrs.field(default=30.0, converter=float, validator=v.gt(0),
                                         metadata=_help("Total seconds one fetch may take."))
    max_page_bytes: int = attrs.field(default=10_000_000, validator=_positive_int,
                                      metadata=_help("Cap on a page's decoded body, in bytes."))
    searxng: SearxngSettings = attrs.field(factory=SearxngSettings)
    brave: KeyedSearchSettings = attrs.field(factory=KeyedSearchSettings)
    tavily: KeyedSearchSettings = attrs.field(factory=KeyedSearchSettings)
    exa: KeyedSearchSettings = attrs.field(factory=KeyedSearchSettings)
    kagi: KeyedSearchSettings = attrs.field(factory=KeyedSearchSettings)


@attrs.frozen
class SandboxSettings:
    backend: str = attrs.field(default="local", validator=v.in_(SANDBOX_BACKENDS),
                               metadata=_help("local (a temp dir) or docker (a locked-down container)."))
    image: str | None = attrs.field(default=None, validator=_optional_str,
                                    metadata=_help("Container image; default research-sandbox:<version>."))
    memory: str = attrs.field(default="1g", validator=[v.instance_of(str), _size_at_least(MIN_MEMORY_BYTES, "6m")],
                              metadata=_help("Container memory limit (swap included)."))
    cpus: float = attrs.field(default=1.0, converter=float, validator=v.gt(0),
                              metadata=_help("CPUs the container may use."))
    pids_limit: int = attrs.field(default=256, validator=_positive_int,
                                  metadata=_help("Most processes the container may hold."))
    tmp_size: str = attrs.field(default="64m", validator=[v.instance_of(str), _size_at_least(1, "1 byte")],
                                metadata=_help("Size of the container's /tmp tmpfs."))
    exec_timeout_s: int = attrs.field(default=60, validator=_positive_int,
                                      metadata=_help("Seconds one tool command may run in the container."))
    transfer: str = attrs.field(default="auto", validator=v.in_(SANDBOX_TRANSFERS),
                                metadata=_help("auto, bind or copy: bind-mount the workspace (local engine) "
                                               "or copy it in and out (remote DOCKER_HOST)."))


@attrs.frozen
class ModelAlias:
    model: str = attrs.field(validator=v.instance_of(str),
                             metadata=_help("litellm model string, e.g. openai/gpt-4o."))
    api_base: str | None = attrs.field(default=None, validator=_optional_str,
                                       metadata=_help("Endpoint for OpenAI-compatible servers."))
    api_key: str | None = attrs.field(default=None, validator=_optional_str,
                                      metadata=_help("API key: $VAR, !command, an env var name, or the key."))
    extra_headers: dict[str, str] = attrs.field(
        factory=dict, validator=v.deep_mapping(v.instance_of(str), v.instance_of(str), v.instance_of(dict)),
        metadata=_help("Extra HTTP headers; values resolve like api_key."))
    context_window: int | None = attrs.field(default=None, validator=_optional_positive_int,
                                             metadata=_help("Tokens the model accepts; default from litellm."))
    max_output_tokens: int | None = attrs.field(default=None, validator=_optional_positive_int,
                                                metadata=_help("Cap on tokens per answer."))
    stream: bool = attrs.field(default=False, validator=v.instance_of(bool),
                               metadata=_help("Stream responses from the endpoint."))


@attrs.frozen
class Config:
    defaults: Defaults = attrs.field(factory=Defaults)
    repo: RepoSettings = attrs.field(factory=RepoSettings)
    web: WebSettings = attrs.field(factory=WebSettings)
    sandbox: SandboxSettings = attrs.field(factory=SandboxSettings)
    models: dict[str, ModelAlias] = attrs.field(factory=dict)
