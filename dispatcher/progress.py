"""Progress on stderr: how much the user sees while a run works.

Three levels, chosen once by the CLI:
- verbose (-v): every step, every tool call with its arguments, result size and
  time, every retry and context elision;
- status (stderr is a terminal): one status line per step, redrawn in place;
- quiet (stderr is not a terminal, no -v): only notices the user must see.
stdout is never touched here: it carries only the answer.
"""

from __future__ import annotations

import json
import sys
import threading
from typing import TextIO

QUIET, STATUS, VERBOSE = "quiet", "status", "verbose"
_MAX_ARGUMENT_CHARS = 160


class Progress:
    def __init__(self, level: str, stream: TextIO | None = None) -> None:
        self.level = level
        self._stream = stream or sys.stderr
        self._status_shown = False
        self._lock = threading.Lock()

    @classmethod
    def for_terminal(cls, verbose: bool, stream: TextIO | None = None) -> "Progress":
        stream = stream or sys.stderr
        if verbose:
            return cls(VERBOSE, stream)
        return cls(STATUS if stream.isatty() else QUIET, stream)

    # -- what callers report -------------------------------------------------
    def status(self, text: str) -> None:
        """A passing status (cloning, fetching, step N): shown on a terminal or under -v."""
        if self.level == VERBOSE:
            self._line(text)
        elif self.level == STATUS:
            with self._lock:
                self._stream.write("\r\x1b[K" + text[: _terminal_width() - 1])
                self._stream.flush()
                self._status_shown = True

    def detail(self, text: str) -> None:
        """Shown only under -v."""
        if self.level == VERBOSE:
            self._line(text)

    def notice(self, text: str) -> None:
        """Always shown: something the user must know (workspace kept, a warning)."""
        self._line(text)

    def finish(self) -> None:
        """Clear the status line so the answer starts on a clean terminal."""
        with self._lock:
            if self._status_shown:
                self._stream.write("\r\x1b[K")
                self._stream.flush()
                self._status_shown = False

    # -- agent events --------------------------------------------------------
    def event(self, event) -> None:
        """Format one of dispatcher.agent's event records."""
        kind = type(event).__name__
        if kind == "StepStarted":
            self.status(f"[step {event.step}/{event.max_steps}] thinking…")
        elif kind == "ToolStarted":
            self.status(f"[tool] {event.name} {_arguments(event.arguments)}")
        elif kind == "ToolFinished":
            outcome = f"error: {event.error}" if event.error else f"{event.result_chars:,} chars"
            self.detail(f"  {event.name}({_arguments(event.arguments)}) → {outcome} in {event.elapsed_s:.2f} s")
        elif kind == "ModelRetry":
            self.status(f"model call failed ({event.reason}); retry {event.attempt} in {event.delay_s:.1f} s")
        elif kind == "ContextElided":
            self.detail(f"  elided {event.count} old tool result(s) to fit the context window")

    def _line(self, text: str) -> None:
        with self._lock:
            if self._status_shown:
                self._stream.write("\r\x1b[K")
                self._status_shown = False
            self._stream.write(text + "\n")
            self._stream.flush()


def _arguments(arguments) -> str:
    text = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
    return text if len(text) <= _MAX_ARGUMENT_CHARS else text[: _MAX_ARGUMENT_CHARS - 1] + "…"


def _terminal_width() -> int:
    import shutil

    return shutil.get_terminal_size((100, 20)).columns
