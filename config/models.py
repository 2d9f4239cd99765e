"""Turning a `--model` name into everything litellm needs to call it."""

from __future__ import annotations

import attrs


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
