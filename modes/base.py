"""What a mode is: a system prompt, a way to prepare the workspace, its tools.

The dispatcher drives every mode through this contract and never asks which
mode it has; adding a mode means adding a module and a line in the registry.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Protocol

import attrs

from config.schema import Config
from modes.tools.definition import Tool
from sandbox.workspace import Workspace


@attrs.frozen
class RunRequest:
    """Everything the user asked for on the command line, mode-independent."""

    mode: str
    question: str
    # repo mode
    target: str | None = None
    ref: str | None = None
    full: bool = False
    depth: int | None = None
    # web mode: pages fetched before the model starts
    urls: tuple[str, ...] = attrs.field(default=(), converter=tuple)


class Sources:
    """The ordered, de-duplicated record of what the agent actually read.

    Tools add to it as they run (concurrently, hence the lock); the report
    lists it and checks the answer's citations against it.
    """

    def __init__(self) -> None:
        self._items: list[str] = []
        self._lock = threading.Lock()

    def add(self, item: str) -> None:
        with self._lock:
            if item not in self._items:
                self._items.append(item)

    def __contains__(self, item: str) -> bool:
        with self._lock:
            return item in self._items

    def items(self) -> list[str]:
        with self._lock:
            return list(self._items)


@attrs.frozen
class Citations:
    """The answer's citations, split into the ones we could check and the rest."""

    verified: tuple[str, ...] = ()
    unverified: tuple[str, ...] = ()


# progress(text) prints one status line to stderr when the user wants it.
Progress = Callable[[str], None]


class Mode(Protocol):
    name: str

    def system_prompt(self) -> str: ...

    def prepare(self, workspace: Workspace, request: RunRequest, config: Config, progress: Progress) -> str:
        """Fill the workspace (clone, fetch) and return the first user message."""

    def tools(self, workspace: Workspace, config: Config, sources: Sources) -> list[Tool]: ...

    def citations(self, answer: str, workspace: Workspace, sources: Sources) -> Citations:
        """Find the answer's citations and check each against what was read."""
