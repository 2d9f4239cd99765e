"""The path-contained file tools both modes offer: read, grep, ls, find.

They touch files only through the Workspace interface, so they run unchanged
on the host (LocalWorkspace) or inside a container (DockerWorkspace), and
containment is the workspace's job, done once. Every path in and out is
workspace-relative, and every output is bounded: the model's context is small
and a hostile repository may hold a 1 GB file or a million matches.
"""

from __future__ import annotations

import codecs
import re
import time
from collections.abc import Iterator
from typing import Annotated

from dispatcher.errors import ToolInputError
from modes.base import Sources
from modes.tools.definition import Tool, tool
from modes.tools.globbing import glob_matcher
from sandbox.workspace import MAX_WALK_ENTRIES, Command, ReadResult, Workspace

# read
MAX_READ_BYTES = 50_000  # output of one read call, notes included
MAX_READ_LINES = 2_000
MAX_LINE_CHARS = 2_000  # longer lines are cut in read output
READ_CHUNK_BYTES = 4_000_000  # fetched per round trip: a container read is one exec
MAX_SCANNED_LINE_BYTES = 1_000_000  # a "line" longer than this is cut while scanning
BINARY_SNIFF_BYTES = 8_192  # NUL bytes here, or mostly undecodable bytes, mean binary
BINARY_UNDECODABLE_SHARE = 0.3
# grep
GREP_TIMEOUT_S = 30.0
GREP_MAX_COLUMNS = 500  # match lines longer than this (bytes) are previewed
DEFAULT_GREP_LIMIT = 100
MAX_GREP_LIMIT = 1_000
MAX_GREP_CONTEXT = 10
MAX_GREP_OUTPUT_BYTES = 2_000_000  # what we take from ripgrep
MAX_GREP_RESULT_BYTES = 50_000  # what the model gets, notes included
# ls and find
DEFAULT_LS_LIMIT = 500
MAX_LS_LIMIT = 5_000
DEFAULT_FIND_LIMIT = 1_000
MAX_FIND_LIMIT = 10_000
MAX_FIND_SCANNED_ENTRIES = MAX_WALK_ENTRIES  # a walk stops here, so find ends on any tree
# Matching is linear, but a hostile pattern over a deep tree still adds up: find answers by then.
FIND_TIME_BUDGET_S = 20.0
MAX_PATTERN_CHARS = 1_000

# Room kept under a byte cap for the note that ends a cut output.
_NOTE_ROOM_BYTES = 200
_RG_MATCH = re.compile(rb"\d+:")
_IGNORE_FILE_ERROR = re.compile(r": line \d+: ")


def file_tools(workspace: Workspace, sources: Sources) -> list[Tool]:
    """read, grep, ls and find, closed over `workspace`; read records what it reads in `sources`."""

    @tool
    def read(
        path: Annotated[str, "File to read, relative to the workspace root."],
        offset: Annotated[int, "First line to show, counting from 1."] = 1,
        limit: Annotated[int, f"Most lines to show (at most {MAX_READ_LINES})."] = MAX_READ_LINES,
    ) -> str:
        """Read a text file as numbered lines: line number, a tab, the text.

        Shows at most 2000 lines and 50 KB per call; lines longer than 2000
        characters are cut. When the file goes on, the output ends with the
        offset to continue from. Binary files are reported, not shown.
        """
        if offset < 1:
            raise ToolInputError("offset counts from 1")
        if limit < 1:
            raise ToolInputError("limit must be at least 1")
        limit = min(limit, MAX_READ_LINES)
        canonical = workspace.resolve(path)
        head = workspace.read_bytes(canonical, BINARY_SNIFF_BYTES)
        if _looks_binary(head):
            return f"{canonical} is a binary file ({head.size:,} bytes); not shown."
        sources.add(canonical)
        if head.size == 0:
            return f"{canonical} is empty (0 bytes)."
        return _numbered(_lines(workspace, canonical, head), canonical, offset, limit)

    @tool
    def grep(
        pattern: Annotated[str, "Regular expression (Rust regex syntax), or plain text with literal=true."],
        path: Annotated[str, "File or directory to search, relative to the workspace root."] = ".",
        glob: Annotated[str | None, "Only search files whose path matches this glob, e.g. '*.py' or '!*_test.go'."] = None,
        ignore_case: Annotated[bool, "Match regardless of case."] = False,
        literal: Annotated[bool, "Treat the pattern as plain text, not a regular expression."] = False,
        context: Annotated[int, f"Lines of context before and after each match (0-{MAX_GREP_CONTEXT})."] = 0,
        limit: Annotated[int, f"Most matching lines to show (1-{MAX_GREP_LIMIT})."] = DEFAULT_GREP_LIMIT,
    ) -> str:
        """Search file contents with ripgrep.

        Prints one match per line as path:line:text (context lines as
        path-line-text, groups separated by '--'), sorted by path. Skips files
        ignored by .gitignore, binary files and .git; never follows symlinks.
        Lines longer than 500 characters are shortened, at most `limit` matches
        (default 100, max 1000) and 50 KB are shown, and a search stops after
        30 seconds.
        """
        _check_argument("pattern", pattern)
        if glob is not None:
            _check_argument("glob", glob)
        if limit < 1:
            raise ToolInputError("limit must be at least 1")
        limit = min(limit, MAX_GREP_LIMIT)
        if not 0 <= context <= MAX_GREP_CONTEXT:
            raise ToolInputError(f"context must be between 0 and {MAX_GREP_CONTEXT}")
        canonical = workspace.resolve(path)
        argv = _rg_argv(pattern, canonical, glob=glob, ignore_case=ignore_case, literal=literal,
                        context=context, limit=limit)
        result = workspace.run(Command(argv, timeout_s=GREP_TIMEOUT_S, max_output_bytes=MAX_GREP_OUTPUT_BYTES))
        if result.exit_code == 2 and not result.stdout and not result.timed_out:
            complaint = _rg_error(result.stderr)
            if complaint is not None and complaint.startswith(f"{canonical}: ") and "(os error 2)" in complaint:
                raise ToolInputError(f"{path!r} does not exist")
            if complaint is not None:
                raise ToolInputError(f"grep failed: {complaint}")
        lines, more = _first_matches(result.stdout, limit)
        if not lines:
            if result.timed_out:
                return f"grep timed out after {GREP_TIMEOUT_S:g} s with no matches; narrow the path or the pattern."
            return f"No matches for {pattern!r} in {canonical}."
        if more or result.truncated:
            lines.append(f"[more matches not shown; narrow the search or raise limit (max {MAX_GREP_LIMIT})]")
        if result.timed_out:
            lines.append(f"[grep timed out after {GREP_TIMEOUT_S:g} s; the results are partial]")
        return "\n".join(lines)

    @tool
    def ls(
        path: Annotated[str, "Directory to list, relative to the workspace root."] = ".",
        limit: Annotated[int, f"Most entries to show (at most {MAX_LS_LIMIT})."] = DEFAULT_LS_LIMIT,
    ) -> str:
        """List a directory, one entry per line, sorted by name.

        Subdirectories end with '/', files show their size in bytes, symlinks
        show as 'name -> (symlink)' and are never followed. Shows at most
        `limit` entries (default 500) and says how many more there are.
        """
        if limit < 1:
            raise ToolInputError("limit must be at least 1")
        limit = min(limit, MAX_LS_LIMIT)
        canonical = workspace.resolve(path)
        entries = workspace.list_dir(canonical)
        if not entries:
            return f"{canonical} is an empty directory."
        lines = [_describe(entry.path.rsplit("/", 1)[-1], entry.kind, entry.size) for entry in entries[:limit]]
        if len(entries) > limit:
            lines.append(f"[{len(entries) - limit} more entries not shown]")
        return "\n".join(lines)

    @tool
    def find(
        pattern: Annotated[str, "Glob, e.g. '*.py' (a name anywhere), '**/test_*.py' or 'src/**/*.{ts,tsx}'."],
        path: Annotated[str, "Directory to search in, relative to the workspace root."] = ".",
        limit: Annotated[int, f"Most paths to show (at most {MAX_FIND_LIMIT})."] = DEFAULT_FIND_LIMIT,
    ) -> str:
        """Find files and directories whose path matches a glob.

        A pattern without '/' matches names at any depth; a pattern with '/'
        matches the whole path below `path`. '*' and '?' stay within one
        directory, a '**' path component spans directories, '[abc]' and
        '{a,b}' work as in a shell. Prints sorted workspace-relative paths,
        directories ending with '/', at most `limit` (default 1000). Skips
        .git; never follows symlinks.
        """
        if limit < 1:
            raise ToolInputError("limit must be at least 1")
        limit = min(limit, MAX_FIND_LIMIT)
        _check_argument("pattern", pattern)
        matches = glob_matcher(pattern)
        canonical = workspace.resolve(path)
        prefix = "" if canonical == "." else canonical + "/"
        found, stopped = [], None
        give_up = time.monotonic() + FIND_TIME_BUDGET_S
        for scanned, entry in enumerate(workspace.walk(canonical)):
            if scanned == MAX_FIND_SCANNED_ENTRIES:
                stopped = f"{MAX_FIND_SCANNED_ENTRIES:,} entries"
                break
            if time.monotonic() > give_up:
                stopped = f"{FIND_TIME_BUDGET_S:g} s ({scanned:,} entries)"
                break
            if matches(entry.path.removeprefix(prefix)):
                found.append(entry.path + ("/" if entry.kind == "dir" else ""))
        if not found:
            if stopped:
                return (f"No paths match {pattern!r} in the first {stopped} of {canonical}; "
                        "search a subdirectory or simplify the pattern.")
            return f"No paths match {pattern!r} in {canonical}."
        found.sort()
        lines = found[:limit]
        if len(found) > limit:
            lines.append(f"[{len(found) - limit} more paths not shown; narrow the pattern or raise limit "
                         f"(max {MAX_FIND_LIMIT})]")
        if stopped:
            lines.append(f"[stopped after {stopped}; search a subdirectory for the rest]")
        return "\n".join(lines)

    return [read, grep, ls, find]


# -- read -------------------------------------------------------------------------------------
def _looks_binary(head: ReadResult) -> bool:
    """NUL bytes in the first bytes, or bytes that are mostly not UTF-8 (a few
    stray ones, as in a Latin-1 comment, are shown as replacement characters)."""
    if b"\x00" in head.data:
        return True
    if not head.data:
        return False
    decoder = codecs.getincrementaldecoder("utf-8")("ignore")
    # final=False: a character cut by the sniff window is not counted as bad.
    valid = decoder.decode(head.data, final=not head.truncated).encode("utf-8")
    pending = len(decoder.getstate()[0])
    return len(head.data) - pending - len(valid) > BINARY_UNDECODABLE_SHARE * len(head.data)


def _lines(workspace: Workspace, path: str, first: ReadResult) -> Iterator[bytes]:
    """The file's lines without their newlines, starting from the bytes already
    read and fetching more a chunk at a time only while the caller wants lines,
    so a huge file is never read whole just to show its first page."""
    chunk, offset, pending, skipping = first, len(first.data), b"", False
    while True:
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
        chunk = workspace.read_bytes(path, READ_CHUNK_BYTES, offset)
        offset += len(chunk.data)
    if pending:
        yield pending


def _numbered(lines: Iterator[bytes], path: str, offset: int, limit: int) -> str:
    """`cat -n` style lines from `offset`, within the line limit and the byte cap,
    ending with where to continue when the file goes on."""
    out: list[str] = []
    used, number = 0, 0
    for number, raw in enumerate(lines, 1):
        if number < offset:
            continue
        if len(out) == limit:
            out.append(f"[file continues; use offset={number} to read on]")
            return "\n".join(out)
        text = raw.decode("utf-8", "replace").removesuffix("\r")
        if len(text) > MAX_LINE_CHARS:
            text = text[:MAX_LINE_CHARS] + f"… [line cut at {MAX_LINE_CHARS} chars]"
        line = f"{number:>6}\t{text}"
        used += len(line.encode("utf-8")) + 1
        if used > MAX_READ_BYTES - _NOTE_ROOM_BYTES and out:
            out.append(f"[output capped at {MAX_READ_BYTES:,} bytes; use offset={number} to read on]")
            return "\n".join(out)
        out.append(line)
    if not out:
        raise ToolInputError(f"offset {offset} is past the end of {path}, which has {number} lines")
    return "\n".join(out)


# -- grep -------------------------------------------------------------------------------------
def _check_argument(name: str, value: str) -> None:
    """Refuse text that cannot travel in an argv (a NUL byte, a lone surrogate)."""
    if not value:
        raise ToolInputError(f"{name} must not be empty")
    if len(value) > MAX_PATTERN_CHARS:
        raise ToolInputError(f"{name} is longer than {MAX_PATTERN_CHARS} characters")
    if "\x00" in value:
        raise ToolInputError(f"{name} contains a NUL byte")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ToolInputError(f"{name} is not valid UTF-8") from None


def _rg_argv(pattern: str, path: str, *, glob: str | None, ignore_case: bool, literal: bool,
             context: int, limit: int) -> list[str]:
    """ripgrep's argv. Every option is ours: the pattern rides inside
    `--regexp=`, the glob inside `--glob=` and the path after `--`, so nothing
    the model sends can become a flag (`--pre`, `--follow`, `--files` ...)."""
    argv = [
        "rg",
        "--no-config",  # never read RIPGREP_CONFIG_PATH
        "--no-follow",
        "--no-require-git",  # honour .gitignore even where the tree is not a git repository
        # A .gitignore may be a symlink out of the workspace; ripgrep reads it
        # and would quote its lines in parse errors.
        "--no-ignore-messages",
        "--hidden",
        "--glob=!.git",
        "--null",  # path, NUL, rest: unambiguous whatever the file names hold
        "--line-number",
        "--with-filename",
        "--no-heading",
        "--color=never",
        "--sort=path",
        f"--max-columns={GREP_MAX_COLUMNS}",
        "--max-columns-preview",
        # Per file, one past the limit so that a cut shows; the total is cut in _first_matches.
        f"--max-count={limit + 1}",
    ]
    if ignore_case:
        argv.append("--ignore-case")
    if literal:
        argv.append("--fixed-strings")
    if context:
        argv.append(f"--context={context}")
    if glob is not None:
        argv.append(f"--glob={glob}")
    # Always an explicit path: with none, ripgrep may search its stdin instead.
    argv += [f"--regexp={pattern}", "--", path]
    return argv


def _first_matches(output: bytes, limit: int) -> tuple[list[str], bool]:
    """ripgrep's `--null` output as path:line:text lines, up to the `limit`-th
    match and within the result cap, and whether anything was left out."""
    kept: list[str] = []
    matches, used = 0, 0
    for raw in output.splitlines():
        path, nul, rest = raw.partition(b"\x00")
        if nul:
            # "3:text" for a match, "3-text" for context; ripgrep writes './'
            # before the paths it finds under '.'.
            is_match = _RG_MATCH.match(rest) is not None
            separator = b":" if is_match else b"-"
            line = (path.removeprefix(b"./") + separator + rest).decode("utf-8", "replace")
        else:  # a '--' group separator or a "binary file matches" note
            is_match = raw != b"--"
            line = raw.removeprefix(b"./").decode("utf-8", "replace")
        if is_match and matches == limit:
            return _without_trailing_separator(kept), True
        used += len(line.encode("utf-8")) + 1
        if used > MAX_GREP_RESULT_BYTES - _NOTE_ROOM_BYTES:
            return _without_trailing_separator(kept), True
        matches += is_match
        kept.append(line)
    return _without_trailing_separator(kept), False


def _without_trailing_separator(lines: list[str]) -> list[str]:
    return lines[:-1] if lines and lines[-1] == "--" else lines


def _rg_error(stderr: bytes) -> str | None:
    """ripgrep's complaint about our pattern, glob or path, in one line, or None
    when it complained only about ignore files."""
    # An ignore file may be a link out of the workspace, and ripgrep quotes the
    # lines it cannot parse ("path: line N: error parsing glob '...'"), even
    # with --no-ignore-messages when the file sits above the searched path.
    lines = [line.strip() for line in stderr.decode("utf-8", "replace").splitlines()
             if line.strip() and not _IGNORE_FILE_ERROR.search(line)]
    errors = [line for line in lines if line.startswith("error:")]
    if errors:  # a regex parse error: the pattern, a caret, then "error: <what>"
        return "regex parse error: " + errors[-1].removeprefix("error:").strip()
    complaints = [line for line in lines if line.startswith("rg: ")]
    if complaints:
        return complaints[0].removeprefix("rg: ")
    return lines[-1] if lines else None


# -- ls and find ------------------------------------------------------------------------------
def _describe(name: str, kind: str, size: int) -> str:
    if kind == "dir":
        return name + "/"
    if kind == "symlink":
        return f"{name} -> (symlink)"
    if kind == "file":
        return f"{name}  ({size:,} bytes)"
    return f"{name}  (special file)"
