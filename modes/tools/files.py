"""The path-contained file tools both modes offer: read, grep, ls, find.

They touch files only through the Workspace interface, so they run unchanged
on the host (LocalWorkspace) or inside a container (DockerWorkspace), and
containment is the workspace's job, done once. Every path in and out is
workspace-relative.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Annotated

from dispatcher.errors import ToolInputError
from modes.base import Sources
from modes.tools.definition import Tool, tool
from sandbox.workspace import Command, Workspace

MAX_READ_BYTES = 50_000  # output of one read call
MAX_LINE_CHARS = 2_000  # longer lines are cut in read output
MAX_READ_LINES = 2_000
READ_CHUNK_BYTES = 1_000_000  # bytes fetched from the workspace per round trip
MAX_SCANNED_LINE_BYTES = 1_000_000  # a "line" longer than this is cut while scanning
BINARY_SNIFF_BYTES = 8_192
GREP_TIMEOUT_S = 30
GREP_MAX_COLUMNS = 500
MAX_GREP_LIMIT = 1_000
MAX_GREP_CONTEXT = 10
MAX_GREP_OUTPUT_BYTES = 2_000_000  # what we take from ripgrep
MAX_GREP_RESULT_BYTES = 50_000  # what the model gets, like every other tool
MAX_LS_LIMIT = 5_000
MAX_FIND_LIMIT = 10_000

_MATCH_LINE = re.compile(rb"^.+?:\d+:")


def file_tools(workspace: Workspace, sources: Sources) -> list[Tool]:
    """read, grep, ls and find, closed over `workspace`; read records what it reads in `sources`."""

    @tool
    def read(
        path: Annotated[str, "File to read, relative to the workspace root."],
        offset: Annotated[int, "First line to show, counting from 1."] = 1,
        limit: Annotated[int, "Most lines to show (at most 2000)."] = MAX_READ_LINES,
    ) -> str:
        """Read a text file as numbered lines (line number, tab, text).

        Shows at most 2000 lines and 50 KB per call; lines over 2000 characters
        are cut. When the file goes on, the output ends with the offset to
        continue from. Binary files are reported, not shown.
        """
        if offset < 1:
            raise ToolInputError("offset counts from 1")
        if not 1 <= limit <= MAX_READ_LINES:
            raise ToolInputError(f"limit must be between 1 and {MAX_READ_LINES}")
        canonical = workspace.resolve(path)
        head = workspace.read_bytes(canonical, BINARY_SNIFF_BYTES)
        if b"\x00" in head.data:
            return f"{canonical} is a binary file ({head.size:,} bytes); not shown."
        sources.add(canonical)
        if head.size == 0:
            return f"{canonical} is empty."
        lines = iter(_split(head.data)) if not head.truncated else _lines(workspace, canonical)
        return _numbered(lines, canonical, offset, limit)

    @tool
    def grep(
        pattern: Annotated[str, "Regular expression (Rust regex syntax), or plain text with literal=true."],
        path: Annotated[str, "File or directory to search, relative to the workspace root."] = ".",
        glob: Annotated[str | None, "Only search files matching this glob, e.g. '*.py' or '!*test*'."] = None,
        ignore_case: Annotated[bool, "Match case-insensitively."] = False,
        literal: Annotated[bool, "Treat the pattern as plain text, not a regex."] = False,
        context: Annotated[int, "Lines of context around each match (0-10)."] = 0,
        limit: Annotated[int, "Most matching lines to show (1-1000)."] = 100,
    ) -> str:
        """Search file contents with ripgrep. Output lines are path:line:text
        (context lines path-line-text). Respects .gitignore, searches hidden
        files except .git, never follows symlinks, cuts lines at 500 characters
        and the whole output at 50 KB."""
        if not 1 <= limit <= MAX_GREP_LIMIT:
            raise ToolInputError(f"limit must be between 1 and {MAX_GREP_LIMIT}")
        if not 0 <= context <= MAX_GREP_CONTEXT:
            raise ToolInputError(f"context must be between 0 and {MAX_GREP_CONTEXT}")
        canonical = workspace.resolve(path)
        # Options are ours alone: the pattern goes after -e and the path after --,
        # so nothing the model sends can become a flag (--pre, --follow, ...).
        argv = ["rg", "--no-config", "--no-follow", "--no-require-git", "--hidden", "--glob=!.git",
                "--line-number", "--with-filename", "--no-heading", "--color=never", "--sort=path",
                f"--max-columns={GREP_MAX_COLUMNS}", "--max-columns-preview"]
        if ignore_case:
            argv.append("--ignore-case")
        if literal:
            argv.append("--fixed-strings")
        if context:
            argv.append(f"--context={context}")
        if glob is not None:
            argv.append(f"--glob={glob}")
        argv += ["--regexp", pattern, "--"]
        if canonical != ".":
            argv.append(canonical)
        result = workspace.run(Command(argv, timeout_s=GREP_TIMEOUT_S, max_output_bytes=MAX_GREP_OUTPUT_BYTES))
        if result.exit_code == 2 and not result.stdout:
            raise ToolInputError(f"grep failed: {_rg_error(result.stderr)}")
        shown, more = _first_matches(result.stdout, limit)
        if not shown:
            if result.timed_out:
                return f"grep timed out after {GREP_TIMEOUT_S} s with no matches; narrow the path or the pattern."
            return f"No matches for {pattern!r} in {canonical}."
        text = shown.decode("utf-8", "replace").rstrip("\n")
        if more or result.truncated:
            text += f"\n[more matches not shown; narrow the search or raise limit (max {MAX_GREP_LIMIT})]"
        if result.timed_out:
            text += f"\n[grep timed out after {GREP_TIMEOUT_S} s; results are partial]"
        return text

    @tool
    def ls(
        path: Annotated[str, "Directory to list, relative to the workspace root."] = ".",
        limit: Annotated[int, "Most entries to show."] = 500,
    ) -> str:
        """List a directory: subdirectories end with '/', files show their size,
        symlinks are marked (and never followed)."""
        if not 1 <= limit <= MAX_LS_LIMIT:
            raise ToolInputError(f"limit must be between 1 and {MAX_LS_LIMIT}")
        canonical = workspace.resolve(path)
        entries = workspace.list_dir(canonical)
        if not entries:
            return f"{canonical} is empty."
        lines = [_describe(entry.path.rsplit("/", 1)[-1], entry.kind, entry.size) for entry in entries[:limit]]
        if len(entries) > limit:
            lines.append(f"[{len(entries) - limit} more entries not shown]")
        return "\n".join(lines)

    @tool
    def find(
        pattern: Annotated[str, "Glob: '*.py' matches names anywhere; 'src/**/*.ts' matches paths; '**' spans directories."],
        path: Annotated[str, "Directory to search, relative to the workspace root."] = ".",
        limit: Annotated[int, "Most paths to show."] = 1000,
    ) -> str:
        """Find files and directories by glob. Paths are workspace-relative,
        directories end with '/'; .git is skipped and symlinks are not followed."""
        if not 1 <= limit <= MAX_FIND_LIMIT:
            raise ToolInputError(f"limit must be between 1 and {MAX_FIND_LIMIT}")
        canonical = workspace.resolve(path)
        matcher = _glob_matcher(pattern)
        found, more = [], False
        prefix = "" if canonical == "." else canonical + "/"
        for entry in workspace.walk(canonical):
            relative = entry.path[len(prefix):] if entry.path.startswith(prefix) else entry.path
            if matcher(relative):
                if len(found) == limit:
                    more = True
                    break
                found.append(entry.path + ("/" if entry.kind == "dir" else ""))
        if not found:
            return f"No paths match {pattern!r} in {canonical}."
        if more:
            found.append(f"[more matches not shown; narrow the pattern or raise limit (max {MAX_FIND_LIMIT})]")
        return "\n".join(found)

    return [read, grep, ls, find]


# -- read -------------------------------------------------------------------------------------
def _lines(workspace: Workspace, path: str) -> Iterator[bytes]:
    """The file's lines without their newlines, fetched a chunk at a time so a
    huge file is never read whole just to show its first page."""
    offset, pending, skipping = 0, b"", False
    while True:
        chunk = workspace.read_bytes(path, READ_CHUNK_BYTES, offset)
        offset += len(chunk.data)
        data = chunk.data
        if skipping:  # the rest of an overlong line we already cut
            newline = data.find(b"\n")
            data, skipping = (b"", True) if newline < 0 else (data[newline + 1:], False)
        lines = (pending + data).split(b"\n")
        pending = lines.pop()
        yield from lines
        if len(pending) > MAX_SCANNED_LINE_BYTES:
            yield pending[:MAX_SCANNED_LINE_BYTES]
            pending, skipping = b"", True
        if not chunk.truncated or not chunk.data:
            break
    if pending:
        yield pending


def _split(data: bytes) -> list[bytes]:
    lines = data.split(b"\n")
    return lines[:-1] if lines[-1] == b"" else lines


def _numbered(lines: Iterator[bytes], path: str, offset: int, limit: int) -> str:
    out, used, number = [], 0, 0
    for number, raw in enumerate(lines, 1):
        if number < offset:
            continue
        if len(out) == limit:
            out.append(f"[file continues; use offset={number} to read on]")
            return "\n".join(out)
        text = raw.decode("utf-8", "replace").rstrip("\r")
        if len(text) > MAX_LINE_CHARS:
            text = text[:MAX_LINE_CHARS] + f"… [line cut at {MAX_LINE_CHARS} chars]"
        line = f"{number:>6}\t{text}"
        used += len(line.encode()) + 1
        if used > MAX_READ_BYTES and out:
            out.append(f"[output capped at {MAX_READ_BYTES:,} bytes; use offset={number} to read on]")
            return "\n".join(out)
        out.append(line)
    if not out:
        raise ToolInputError(f"offset {offset} is past the end of {path} ({number} lines)")
    return "\n".join(out)


# -- grep, ls, find ---------------------------------------------------------------------------
def _first_matches(output: bytes, limit: int) -> tuple[bytes, bool]:
    """ripgrep's output up to the `limit`-th match line (and within the result
    cap), and whether more followed."""
    kept, matches, size = [], 0, 0
    for line in output.splitlines(keepends=True):
        size += len(line)
        if size > MAX_GREP_RESULT_BYTES and kept:
            return b"".join(kept), True
        if _MATCH_LINE.match(line):
            if matches == limit:
                return b"".join(kept), True
            matches += 1
        kept.append(line)
    return b"".join(kept), False


def _rg_error(stderr: bytes) -> str:
    """ripgrep's complaint in one line: its `error:` line, or its last line."""
    lines = [line.strip() for line in stderr.decode("utf-8", "replace").splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith(("error:", "rg:"))]
    return (errors or lines or ["ripgrep exited with an error"])[-1]


def _describe(name: str, kind: str, size: int) -> str:
    if kind == "dir":
        return name + "/"
    if kind == "symlink":
        return f"{name} -> (symlink)"
    if kind == "file":
        return f"{name}  ({size:,} bytes)"
    return f"{name}  (special file)"


def _glob_matcher(pattern: str):
    """A predicate for workspace-relative paths: a pattern without '/' matches
    the last component anywhere; one with '/' matches the whole path; '**'
    spans directories, '*' and '?' stay within one."""
    if not pattern or "\x00" in pattern:
        raise ToolInputError("pattern must be a non-empty glob")
    regex = re.compile(_glob_to_regex(pattern.strip("/")) + r"\Z", re.DOTALL)
    if "/" in pattern.strip("/"):
        return lambda relative: regex.match(relative) is not None
    return lambda relative: regex.match(relative.rsplit("/", 1)[-1]) is not None


def _glob_to_regex(pattern: str) -> str:
    out, i = [], 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        elif pattern[i] == "[" and "]" in pattern[i + 2:]:
            end = pattern.index("]", i + 2)
            body = pattern[i + 1:end]
            body = "^" + body[1:] if body.startswith("!") else body
            out.append("[" + body.replace("\\", "\\\\") + "]")
            i = end + 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return "".join(out)
