"""The final report: what a run prints on stdout, as text or as one JSON object."""

from __future__ import annotations

import json
from typing import Any

import attrs


@attrs.frozen
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0


@attrs.frozen
class Report:
    answer: str
    mode: str
    model: str
    # What the agent actually read, in order of use: files (repo) or URLs (web).
    sources: tuple[str, ...]
    # The answer's citations we checked against the workspace or the fetched pages,
    # and the ones we could not (a path:line past the end, a URL never fetched).
    citations: tuple[str, ...]
    unverified_citations: tuple[str, ...]
    usage: Usage
    steps: int
    tool_calls: int
    stopped: str  # "answer" | "max_steps"
    workspace: str | None  # kept workspace, or None when it was removed
    elapsed_s: float
    # Whether the text form lists the sources under the answer.
    list_sources: bool = False

    def as_json(self) -> dict[str, Any]:
        return {
            "answer": self.answer,
            "mode": self.mode,
            "model": self.model,
            "sources": list(self.sources),
            "citations": list(self.citations),
            "unverified_citations": list(self.unverified_citations),
            "usage": attrs.asdict(self.usage),
            "steps": self.steps,
            "tool_calls": self.tool_calls,
            "stopped": self.stopped,
            "workspace": self.workspace,
            "elapsed_s": round(self.elapsed_s, 3),
        }

    def render(self, as_json: bool) -> str:
        if as_json:
            return json.dumps(self.as_json(), ensure_ascii=False, indent=2)
        text = self.answer.rstrip()
        if self.list_sources and self.sources:
            listed = "\n".join(f"{n}. {source}" for n, source in enumerate(self.sources, 1))
            text += f"\n\nSources:\n{listed}"
        return text
