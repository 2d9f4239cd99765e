"""read, grep, ls and find over a real LocalWorkspace with real ripgrep, as the
model calls them: through Tool.invoke with JSON arguments."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from modes.base import Sources
from modes.tools.files import MAX_READ_BYTES, file_tools
from sandbox.local import LocalWorkspace


@pytest.fixture
def tree(tmp_path):
    """A workspace with a small project, plus a canary file and directory outside it."""
    outside = tmp_path / "outside"
    outside.mkdir()
    canary_text = f"CANARY-{os.urandom(8).hex()}"
    (outside / "canary.txt").write_text(canary_text + "\n")
    workspace = LocalWorkspace.open("repo")
    root = workspace.host_dir
    (root / "src").mkdir()
    (root / "src" / "app.py").write_text("def main():\n    return greet()\n\n\ndef greet():\n    return 'hello'\n")
    (root / "notes.md").write_text("# Notes\nGreet people kindly.\n")
    (root / "big.txt").write_text("".join(f"line {n}\n" for n in range(1, 5001)))
    (root / "wide.txt").write_text("x" * 5000 + " greet\nshort\n")
    (root / "blob.bin").write_bytes(b"\x89PNG\x00\x00greet")
    (root / "empty.txt").write_text("")
    (root / ".gitignore").write_text("ignored.txt\n")
    (root / "ignored.txt").write_text("greet from an ignored file\n")
    os.symlink(outside / "canary.txt", root / "leak.txt")
    os.symlink(outside, root / "outdir")
    sibling = Path(str(root) + "2")
    sibling.mkdir()
    (sibling / "secret.txt").write_text(canary_text)
    sources = Sources()
    tools = {t.name: t for t in file_tools(workspace, sources)}
    yield workspace, tools, sources, canary_text, outside, sibling
    workspace.close()
    (sibling / "secret.txt").unlink()
    sibling.rmdir()


def call(tools, name, **arguments) -> str:
    return tools[name].invoke(json.dumps(arguments))


# -- read -------------------------------------------------------------------------------------
def test_read_numbers_lines_and_records_the_source(tree):
    """read shows right-aligned line numbers and a tab, and records the file as read."""
    _, tools, sources, *_ = tree
    out = call(tools, "read", path="src/app.py")
    assert out.splitlines()[4] == "     5\tdef greet():"
    assert sources.items() == ["src/app.py"]


def test_read_offset_limit_and_continuation_hint(tree):
    """offset/limit page through a file and the output says where to continue."""
    _, tools, *_ = tree
    out = call(tools, "read", path="big.txt", offset=10, limit=3)
    assert out.splitlines() == ["    10\tline 10", "    11\tline 11", "    12\tline 12",
                                "[file continues; use offset=13 to read on]"]


def test_read_default_stops_at_2000_lines(tree):
    """Without a limit, read shows 2000 lines and points at line 2001."""
    _, tools, *_ = tree
    out = call(tools, "read", path="big.txt")
    assert "  2000\tline 2000" in out and out.endswith("use offset=2001 to read on]")


def test_read_output_is_capped_at_50kb(tree):
    """A file of long lines is cut at 50 KB of output with a continuation offset."""
    workspace, tools, *_ = tree
    (workspace.host_dir / "fat.txt").write_text(("y" * 1000 + "\n") * 200)
    out = call(tools, "read", path="fat.txt")
    assert len(out.encode()) <= MAX_READ_BYTES + 200
    assert "[output capped at 50,000 bytes; use offset=" in out


def test_read_cuts_lines_over_2000_chars(tree):
    """A 5000-char line is shown cut at 2000 chars with a marker."""
    _, tools, *_ = tree
    first = call(tools, "read", path="wide.txt").splitlines()[0]
    assert first.endswith("… [line cut at 2000 chars]") and first.count("x") == 2000


def test_read_binary_empty_missing_directory_and_past_end(tree):
    """Binary, empty, missing, directory and past-the-end reads each get a clear notice."""
    _, tools, *_ = tree
    assert call(tools, "read", path="blob.bin") == "blob.bin is a binary file (11 bytes); not shown."
    assert call(tools, "read", path="empty.txt") == "empty.txt is empty."
    assert call(tools, "read", path="nope.txt") == "Error: 'nope.txt' does not exist"
    assert "is a directory" in call(tools, "read", path="src")
    assert call(tools, "read", path="notes.md", offset=9) == "Error: offset 9 is past the end of notes.md (2 lines)"


# -- grep -------------------------------------------------------------------------------------
def test_grep_finds_matches_as_path_line_text_and_respects_gitignore(tree):
    """grep prints path:line:text, workspace-relative, and skips .gitignored files."""
    _, tools, *_ = tree
    out = call(tools, "grep", pattern="def greet")
    assert out == "src/app.py:5:def greet():"
    assert "ignored.txt" not in call(tools, "grep", pattern="greet")


def test_grep_options_case_literal_glob_context_limit(tree):
    """ignore_case, literal, glob, context and limit each shape the output."""
    _, tools, *_ = tree
    assert "notes.md:2:Greet people kindly." in call(tools, "grep", pattern="greet people", ignore_case=True)
    assert call(tools, "grep", pattern="return greet()", literal=True) == "src/app.py:2:    return greet()"
    assert call(tools, "grep", pattern="greet(", literal=False).startswith("Error: grep failed")
    assert call(tools, "grep", pattern="greet", glob="*.md", ignore_case=True).startswith("notes.md:2:")
    with_context = call(tools, "grep", pattern="def greet", context=1)
    assert "src/app.py-4-" in with_context and "src/app.py-6-    return 'hello'" in with_context
    limited = call(tools, "grep", pattern="line", path="big.txt", limit=2)
    assert limited.splitlines()[:2] == ["big.txt:1:line 1", "big.txt:2:line 2"]
    assert "more matches not shown" in limited


def test_grep_output_is_capped_at_50kb(tree):
    """A thousand long matches are cut at 50 KB of output, with a note."""
    workspace, tools, *_ = tree
    (workspace.host_dir / "many.txt").write_text(("needle " + "z" * 300 + "\n") * 1000)
    out = call(tools, "grep", pattern="needle", path="many.txt", limit=1000)
    assert len(out.encode()) <= 50_000 + 200 and out.endswith("raise limit (max 1000)]")


def test_grep_cuts_long_match_lines_and_reports_bad_regex(tree):
    """Match lines over 500 chars are previewed, and a bad regex is an error for the model."""
    _, tools, *_ = tree
    wide = call(tools, "grep", pattern="greet", path="wide.txt")
    assert len(wide) < 1000
    assert call(tools, "grep", pattern="((") == "Error: grep failed: error: unclosed group"
    assert call(tools, "grep", pattern="zzz-not-there") == "No matches for 'zzz-not-there' in .."


# -- ls and find ------------------------------------------------------------------------------
def test_ls_marks_directories_sizes_and_symlinks_and_limits(tree):
    """ls shows dirs with '/', file sizes, symlinks without following them, and a limit note."""
    _, tools, *_ = tree
    out = call(tools, "ls")
    assert "src/" in out.splitlines() and "notes.md  (29 bytes)" in out
    assert "leak.txt -> (symlink)" in out and "outdir -> (symlink)" in out
    assert call(tools, "ls", limit=2).endswith("more entries not shown]")


def test_find_globs_by_name_and_by_path(tree):
    """find matches names anywhere, paths with '**', and caps the list."""
    _, tools, *_ = tree
    assert call(tools, "find", pattern="*.py") == "src/app.py"
    assert call(tools, "find", pattern="src/**/*.py") == "src/app.py"
    assert call(tools, "find", pattern="src") == "src/"
    assert "more matches not shown" in call(tools, "find", pattern="*.txt", limit=1)
    assert call(tools, "find", pattern="*.rs") == "No paths match '*.rs' in .."


# -- containment: hostile calls ----------------------------------------------------------------
HOSTILE_CALLS = [
    ("read", {"path": "leak.txt"}),
    ("read", {"path": "outdir/canary.txt"}),
    ("read", {"path": "../outside/canary.txt"}),
    ("read", {"path": "../../../../../../../../etc/passwd"}),
    ("read", {"path": "/etc/passwd"}),
    ("read", {"path": "notes.md\u0000"}),
    ("grep", {"pattern": "CANARY", "path": "outdir"}),
    ("grep", {"pattern": "CANARY", "path": ".."}),
    ("grep", {"pattern": "CANARY", "path": "leak.txt"}),
    ("grep", {"pattern": "--pre=cat", "path": "."}),
    ("grep", {"pattern": "CANARY", "glob": "--follow"}),
    ("grep", {"pattern": "-L", "path": "."}),
    ("ls", {"path": "outdir"}),
    ("ls", {"path": "/"}),
    ("find", {"pattern": "*canary*", "path": "outdir"}),
    ("find", {"pattern": "*", "path": ".."}),
]


@pytest.mark.parametrize("name, arguments", HOSTILE_CALLS, ids=[f"{n}-{a}" for n, a in HOSTILE_CALLS])
def test_hostile_call_never_returns_a_canary_byte(tree, name, arguments):
    """Escapes through symlinks, '..', absolute paths, NUL bytes and option-like input reveal nothing outside."""
    _, tools, _, canary_text, outside, _ = tree
    before = sorted(outside.iterdir())
    out = tools[name].invoke(json.dumps(arguments))
    assert canary_text not in out
    assert "root:x:0:0" not in out
    assert sorted(outside.iterdir()) == before


def test_grep_does_not_follow_a_symlinked_directory_out(tree):
    """Searching the whole workspace for the canary finds nothing: ripgrep never follows links."""
    _, tools, _, canary_text, *_ = tree
    assert call(tools, "grep", pattern=canary_text).startswith("No matches")


def test_sibling_prefix_path_is_refused(tree):
    """'<root>2' shares the root's prefix but is outside: refused by every tool."""
    workspace, tools, _, canary_text, _, sibling = tree
    escape = f"../{sibling.name}/secret.txt"
    for name, arguments in (("read", {"path": escape}), ("grep", {"pattern": "CANARY", "path": escape}),
                            ("ls", {"path": f"../{sibling.name}"})):
        out = tools[name].invoke(json.dumps(arguments))
        assert "outside the workspace" in out and canary_text not in out


def test_symlink_refusals_say_outside_the_workspace(tree):
    """The model is told plainly why an escape failed."""
    _, tools, *_ = tree
    assert call(tools, "read", path="leak.txt") == "Error: 'leak.txt' is outside the workspace"
    assert call(tools, "read", path="/etc/passwd").startswith("Error: '/etc/passwd' is absolute")
