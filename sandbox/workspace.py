"""The Workspace interface: the only way a tool touches files or runs a program.

A workspace is a directory tree the agent may explore and nothing else. Every
backend (a temp dir on the host, a Docker container) implements this small
interface, and no code outside `sandbox/` asks which backend it has.

Paths crossing this interface are *workspace-relative*, '/'-separated strings
('.' is the root). Containment is enforced here, once per backend: a path that
leaves the workspace, directly or through a symlink, raises ToolInputError.
"""

from __future__ import annotations

import abc
import os
import shutil
import subprocess
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import MappingProxyType

import attrs

from dispatcher.errors import ToolInputError

# A command's stdout beyond this is dropped (and `truncated` set), so a tool
# that prints without bound cannot exhaust memory.
MAX_COMMAND_OUTPUT_BYTES = 4_000_000
DEFAULT_COMMAND_TIMEOUT_S = 30.0
# A walk may stop after this many entries and one more (the one more tells the
# caller the tree went on), so that a hostile tree of millions of files costs
# bounded memory; callers stop at this many and say so.
MAX_WALK_ENTRIES = 500_000
# Removing a workspace: attempts, and the pause between them.
REMOVE_ATTEMPTS = 3
REMOVE_RETRY_S = 0.1


def _frozen_mapping(value: Mapping[str, str] | None) -> Mapping[str, str]:
    return MappingProxyType(dict(value or {}))


def check_path_syntax(path: str) -> str:
    """The refusals every backend makes before resolving: not a string, a NUL
    byte, an absolute path, text that is not UTF-8. Returns the path ('.' for '')."""
    if not isinstance(path, str):
        raise ToolInputError("path must be a string")
    if "\x00" in path:
        raise ToolInputError("path contains a NUL byte")
    if os.path.isabs(path):
        raise ToolInputError(f"{path!r} is absolute; use a path relative to the workspace root")
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        raise ToolInputError(f"{path!r} is not valid UTF-8") from None
    return path or "."


def remove_tree(path: str | os.PathLike) -> bool:
    """Remove `path` and everything below it; True when it is gone. A process
    that was still writing there as it was killed (a clone's index-pack) gets
    a moment to end before the second attempt."""
    for attempt in range(REMOVE_ATTEMPTS):
        if attempt:
            time.sleep(REMOVE_RETRY_S)
        try:
            shutil.rmtree(path, ignore_errors=True)
        except RecursionError:
            # rmtree recurses once per level, and a hostile repository can be
            # deeper than Python allows; rm walks by descriptor at any depth.
            # Its own session keeps a terminal's Ctrl-C from cutting it short.
            subprocess.run(["rm", "-rf", "--one-file-system", "--", os.fspath(path)], stdin=subprocess.DEVNULL,
                           capture_output=True, check=False, start_new_session=True)
        if not os.path.lexists(path):
            return True
    return False


class CappedBuffer:
    """Keeps the first `cap` bytes written to it and counts the rest as overflow,
    so a program that prints without bound cannot exhaust our memory."""

    def __init__(self, cap: int) -> None:
        self._cap = cap
        self._chunks: list[bytes] = []
        self._kept = 0
        self.overflowed = False

    def add(self, chunk: bytes) -> None:
        room = self._cap - self._kept
        if len(chunk) > room:
            self.overflowed = True
            chunk = chunk[: max(room, 0)]
        if chunk:
            self._chunks.append(chunk)
            self._kept += len(chunk)

    def data(self) -> bytes:
        return b"".join(self._chunks)


@attrs.frozen
class Command:
    """A program to run inside the workspace: an argv, never a shell string."""

    argv: tuple[str, ...] = attrs.field(converter=tuple)
    timeout_s: float = DEFAULT_COMMAND_TIMEOUT_S
    # Workspace-relative directory to run in.
    cwd: str = "."
    # Variables added on top of the scrubbed base environment.
    env: Mapping[str, str] = attrs.field(factory=dict, converter=_frozen_mapping)
    max_output_bytes: int = MAX_COMMAND_OUTPUT_BYTES

    @argv.validator
    def _check_argv(self, _attribute, value):
        if not value or not all(isinstance(arg, str) for arg in value):
            raise ValueError("argv must be a non-empty sequence of strings")


@attrs.frozen
class CommandResult:
    """What a finished (or killed) command left behind."""

    exit_code: int
    stdout: bytes
    stderr: bytes
    timed_out: bool = False
    # stdout was longer than Command.max_output_bytes and was cut.
    truncated: bool = False


@attrs.frozen
class Entry:
    """One directory entry, as `list_dir` and `walk` report it."""

    path: str  # workspace-relative, '/'-separated
    kind: str  # "file" | "dir" | "symlink" | "other"
    size: int  # bytes; 0 for directories


@attrs.frozen
class ReadResult:
    """Bytes read from a file, and whether the file went on past the cap."""

    data: bytes
    size: int  # the whole file's size in bytes
    truncated: bool


class Workspace(abc.ABC):
    """A contained directory tree plus a place to run programs over it.

    `host_dir` is the host directory that holds the workspace files. Preparation
    (cloning, fetching) happens on the host side and writes there; tools never
    use it, they go through the methods below so that a backend can run them
    elsewhere (inside a container).
    """

    mode: str
    host_dir: Path

    # -- paths ---------------------------------------------------------------
    @abc.abstractmethod
    def resolve(self, path: str) -> str:
        """Canonical workspace-relative form of `path` after following symlinks.

        The path need not exist. Raises ToolInputError for anything that is not
        inside the workspace: absolute paths, '..' escapes, symlinks pointing
        out, NUL bytes, sibling-prefix paths.
        """

    # -- files ---------------------------------------------------------------
    @abc.abstractmethod
    def read_bytes(self, path: str, max_bytes: int, offset: int = 0) -> ReadResult:
        """Up to `max_bytes` of the file at `path`, starting at byte `offset`.

        Raises ToolInputError if the path is outside, missing or not a file.
        """

    @abc.abstractmethod
    def list_dir(self, path: str = ".") -> list[Entry]:
        """The direct children of a directory, sorted by name."""

    @abc.abstractmethod
    def walk(self, path: str = ".") -> Iterator[Entry]:
        """Every entry below `path`, depth first, sorted; never follows symlinks
        and never descends into `.git`. May stop after MAX_WALK_ENTRIES + 1."""

    @abc.abstractmethod
    def write_bytes(self, path: str, data: bytes) -> str:
        """Create or replace a file (creating parent directories) and return its
        canonical workspace-relative path. Used by modes to save fetched pages."""

    # -- programs ------------------------------------------------------------
    @abc.abstractmethod
    def run(self, command: Command) -> CommandResult:
        """Run `command` with a scrubbed environment and its timeout; never raises
        for a non-zero exit, only for a command that could not start at all."""

    # -- lifetime ------------------------------------------------------------
    def after_prepare(self) -> None:
        """Called once the mode has written its content into `host_dir`; backends
        that do not share `host_dir` with where tools run copy it over here."""

    @abc.abstractmethod
    def close(self, keep: bool = False) -> None:
        """Release the workspace: remove everything, or keep it when `keep`.
        Safe to call twice."""

    def kept_message(self) -> str:
        """What to tell the user when the workspace is kept."""
        return f"workspace kept at {self.host_dir}"

    def __enter__(self) -> "Workspace":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close(keep=False)
