"""Turning a `--model` name into everything litellm needs to call it."""

from __future__ import annotations

import re
from collections.abc import Mapping

import attrs

from config.schema import Config
from config.secrets import resolve_secret
from dispatcher.errors import UsageError


@attrs.frozen
class ModelSpec:
    """A model ready to call: the litellm model string plus its endpoint settings.

    Secrets are already resolved here; never print `api_key` or header values.
    """

    name: str  # what the user asked for (an alias or a model string), for the report
    litellm_model: str  # e.g. "anthropic/claude-sonnet-4-5", "openai/gpt-4o"
    api_base: str | None = None
    api_key: str | None = attrs.field(default=None, repr=False)
    extra_headers: dict[str, str] = attrs.field(factory=dict, repr=False)
    context_window: int | None = None
    max_output_tokens: int | None = None
    stream: bool = False


_PROVIDER_WORD = re.compile(r"[a-z][a-z0-9_-]*")


def mode_model_name(config: Config, mode: str) -> str:
    """The model a mode uses: its own `[repo]`/`[web]` model, else `[defaults] model`."""
    own = getattr(config, mode).model if mode in ("repo", "web") else None
    return own or config.defaults.model


def resolve_model(name: str, config: Config, environ: Mapping[str, str]) -> ModelSpec:
    """A ModelSpec for an alias from [models], a litellm string, or provider:model."""
    name = name.strip()
    if not name:
        raise UsageError("--model is empty; name an alias from [models] or provider/model")
    alias = config.models.get(name)
    if alias is not None:
        prefix = f"models.{name}"
        return ModelSpec(
            name=name,
            litellm_model=normalise_model_string(alias.model),
            api_base=alias.api_base,
            api_key=resolve_secret(alias.api_key, key=f"{prefix}.api_key", environ=environ),
            extra_headers={header: resolve_secret(value, key=f"{prefix}.extra_headers.{header}", environ=environ)
                           for header, value in alias.extra_headers.items()},
            context_window=alias.context_window,
            max_output_tokens=alias.max_output_tokens,
            stream=alias.stream,
        )
    litellm_model = normalise_model_string(name)
    if "/" not in litellm_model:
        known = ", ".join(sorted(config.models)) or "none defined"
        raise UsageError(f"unknown model {name!r}: not an alias in [models] ({known}) and not provider/model, "
                         "e.g. anthropic/claude-sonnet-4-5")
    return ModelSpec(name=name, litellm_model=litellm_model)


def normalise_model_string(model: str) -> str:
    """`anthropic:claude-x` → `anthropic/claude-x`; strings with a slash are litellm's already
    (so `ollama/llama3:8b` keeps its tag)."""
    if "/" not in model and ":" in model:
        provider, rest = model.split(":", 1)
        if _PROVIDER_WORD.fullmatch(provider) and rest:
            return f"{provider}/{rest}"
    return model
