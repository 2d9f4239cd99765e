"""read, grep, ls and find over a real LocalWorkspace with real ripgrep, called
as the model calls them (Tool.invoke with JSON arguments) and judged by the
text the model gets back; the containment cases run on the Docker backend too.
The tree is described in tests/support/workspaces.py."""

from __future__ import annotations

import json
import os
import threading

import pytest

from modes.tools.files import (
    MAX_GREP_RESULT_BYTES,
    MAX_LINE_CHARS,
    MAX_READ_BYTES,
    MAX_READ_LINES,
    READ_CHUNK_BYTES,
    file_tools,
)
from modes.base import Sources
from sandbox.local import LocalWorkspace
from tests.support.docker_engine import docker_engine, docker_settings, sandbox  # noqa: F401
from tests.support.workspaces import (  # noqa: F401
    BIG_FILE_LINES,
    backend_workspace,
    contained_project,
    private_tmpdir,
    project,
    workspace,
)


# How long a call that should answer at once may take before the test calls it hung.
HANG_GUARD_S = 30


# -- read -------------------------------------------------------------------------------------
def test_read_numbers_lines_cat_n_style_and_records_the_source(project):
    """read shows a right-aligned line number, a tab and the text, and records the file as read."""
    out = project.call("read", path="src/app.py")
    assert out.splitlines() == [
        "     1\tdef main():",
        "     2\t    return greet()",
        "     3\t",
        "     4\t",
        "     5\tdef greet():",
        "     6\t    return 'hello'",
    ]
    assert project.sources.items() == ["src/app.py"]


def test_read_records_the_canonical_path(project):
    """Reading through a link inside, or a roundabout path, records the real file once."""
    assert project.call("read", path="inside-link").startswith("     1\tdef main():")
    project.call("read", path="./src/../src/app.py")
    assert project.sources.items() == ["src/app.py"]


def test_read_offset_limit_and_continuation_hint(project):
    """offset and limit page through a file, and the output says where to continue."""
    out = project.call("read", path="big.txt", offset=10, limit=3)
    assert out.splitlines() == ["    10\tline 10", "    11\tline 11", "    12\tline 12",
                                "[file continues; use offset=13 to read on]"]
    last = project.call("read", path="big.txt", offset=BIG_FILE_LINES - 1, limit=5)
    assert last.splitlines() == ["  4999\tline 4999", "  5000\tline 5000"]


def test_read_shows_2000_lines_by_default_and_never_more(project):
    """Without a limit read stops at line 2000; a larger limit is held to 2000."""
    for arguments in ({}, {"limit": 100_000}):
        out = project.call("read", path="big.txt", **arguments)
        lines = out.splitlines()
        assert len(lines) == MAX_READ_LINES + 1 and lines[-2] == "  2000\tline 2000"
        assert lines[-1] == "[file continues; use offset=2001 to read on]"


def test_read_output_is_capped_at_50kb_at_a_line_boundary(project):
    """A file of long lines is cut at 50 KB of output, after a whole line, with the offset to go on."""
    (project.root / "fat.txt").write_text("".join(f"{n:04} " + "y" * 995 + "\n" for n in range(1, 201)))
    out = project.call("read", path="fat.txt")
    assert len(out.encode()) <= MAX_READ_BYTES
    *shown, note = out.splitlines()
    assert all(line.endswith("y" * 995) for line in shown)
    assert note == f"[output capped at 50,000 bytes; use offset={len(shown) + 1} to read on]"
    following = project.call("read", path="fat.txt", offset=len(shown) + 1, limit=1)
    assert following.startswith(f"{len(shown) + 1:>6}\t{len(shown) + 1:04} ")


def test_read_cuts_lines_over_2000_chars(project):
    """A 5000-char line is shown cut at 2000 chars with a marker; the next line keeps its number."""
    first, second = project.call("read", path="wide.txt").splitlines()
    assert first == "     1\t" + "x" * MAX_LINE_CHARS + "… [line cut at 2000 chars]"
    assert second == "     2\tshort"


def test_read_a_single_line_bigger_than_a_chunk(project):
    """A line longer than one chunk of reading is cut, and the lines after it are still numbered right."""
    (project.root / "minified.js").write_bytes(b"var a=1;" * (READ_CHUNK_BYTES // 4) + b"\nsecond\nthird\n")
    lines = project.call("read", path="minified.js", offset=1, limit=2).splitlines()
    assert lines[0].endswith("… [line cut at 2000 chars]") and lines[1] == "     2\tsecond"
    assert lines[2] == "[file continues; use offset=3 to read on]"


def test_read_fetches_only_what_it_shows_from_a_huge_file(project):
    """Showing the first lines of a large file reads about one chunk, not the whole file."""
    counting = _CountingWorkspace("repo", project.root)
    tools = {t.name: t for t in file_tools(counting, Sources())}
    (project.root / "huge.log").write_bytes(b"log line\n" * (8 * READ_CHUNK_BYTES // 9))
    out = tools["read"].invoke(json.dumps({"path": "huge.log", "limit": 10}))
    assert out.endswith("[file continues; use offset=11 to read on]")
    assert counting.bytes_read <= READ_CHUNK_BYTES + 10_000


class _CountingWorkspace(LocalWorkspace):
    """A real LocalWorkspace that also counts the bytes read through it."""

    bytes_read = 0

    def read_bytes(self, path, max_bytes, offset=0):
        result = super().read_bytes(path, max_bytes, offset)
        self.bytes_read += len(result.data)
        return result


def test_read_binary_and_undecodable_files_get_a_notice(project):
    """Files with NUL bytes or mostly non-UTF-8 bytes are described, never dumped, and not recorded."""
    assert project.call("read", path="blob.bin") == "blob.bin is a binary file (15 bytes); not shown."
    assert project.call("read", path="noise.dat") == "noise.dat is a binary file (1,024 bytes); not shown."
    assert project.sources.items() == []


def test_read_shows_stray_bytes_as_replacement_characters(project):
    """A text file with one Latin-1 byte is shown, the stray byte replaced."""
    assert project.call("read", path="latin1.txt") == "     1\tcaf\ufffd au lait"


def test_read_empty_missing_directory_and_past_the_end(project):
    """Empty, missing, directory and past-the-end reads each get a clear sentence."""
    assert project.call("read", path="empty.txt") == "empty.txt is empty (0 bytes)."
    assert project.call("read", path="nope.txt") == "Error: 'nope.txt' does not exist"
    assert project.call("read", path="src") == "Error: 'src' is a directory; use ls to list it"
    assert project.call("read", path="notes.md", offset=9) == \
        "Error: offset 9 is past the end of notes.md, which has 2 lines"
    assert project.call("read", path="notes.md", offset=0) == "Error: offset counts from 1"


# -- grep -------------------------------------------------------------------------------------
def test_grep_prints_path_line_text_and_respects_gitignore(project):
    """grep prints workspace-relative path:line:text sorted by path, skipping .gitignored files."""
    assert project.call("grep", pattern="def greet") == "src/app.py:5:def greet():"
    out = project.call("grep", pattern="greet")
    assert "ignored.txt" not in out and "blob.bin" not in out
    assert out.splitlines()[:2] == ["-dash.txt:1:a dash greeting", "src/app.py:2:    return greet()"]


def test_grep_in_a_directory_or_a_file(project):
    """path narrows the search to a directory or one file, and paths stay workspace-relative."""
    assert project.call("grep", pattern="greet", path="src/util") == "src/util/helpers.py:2:    return 'greet helper'"
    assert project.call("grep", pattern="Greet", path="notes.md") == "notes.md:2:Greet people kindly."
    assert project.call("grep", pattern="def", path="inside-link").startswith("src/app.py:1:def main():")


def test_grep_ignore_case_and_literal(project):
    """ignore_case matches any case; literal treats regex characters as text."""
    assert "notes.md:2:Greet people kindly." in project.call("grep", pattern="greet people", ignore_case=True)
    assert project.call("grep", pattern="greet people") == "No matches for 'greet people' in .."
    assert project.call("grep", pattern="return greet()", literal=True) == "src/app.py:2:    return greet()"


def test_grep_glob_filters_files(project):
    """glob keeps only matching files; a '!' glob excludes them."""
    assert project.call("grep", pattern="greet", glob="*.md", ignore_case=True) == "notes.md:2:Greet people kindly."
    excluded = project.call("grep", pattern="greet", glob="!*.py")
    assert ".py:" not in excluded and "-dash.txt:1:" in excluded


def test_grep_context_lines(project):
    """context shows neighbouring lines as path-line-text, groups apart with '--'."""
    out = project.call("grep", pattern="def greet|def main", path="src/app.py", context=1)
    assert out.splitlines() == [
        "src/app.py:1:def main():",
        "src/app.py-2-    return greet()",
        "--",
        "src/app.py-4-",
        "src/app.py:5:def greet():",
        "src/app.py-6-    return 'hello'",
    ]
    assert project.call("grep", pattern="x", context=11) == "Error: context must be between 0 and 10"


def test_grep_context_lines_that_look_like_matches_are_not_counted(project):
    """A context line holding 'name:12:' text does not use up the match limit."""
    (project.root / "colons.txt").write_text("a:12:b\nneedle one\nc:34:d\nneedle two\n")
    out = project.call("grep", pattern="needle", path="colons.txt", context=1, limit=2)
    assert out.splitlines() == ["colons.txt-1-a:12:b", "colons.txt:2:needle one", "colons.txt-3-c:34:d",
                                "colons.txt:4:needle two"]


def test_grep_limit_counts_matches_across_files(project):
    """limit caps the matches shown in total and says more were found."""
    limited = project.call("grep", pattern="line", path="big.txt", limit=2)
    assert limited.splitlines() == ["big.txt:1:line 1", "big.txt:2:line 2",
                                    "[more matches not shown; narrow the search or raise limit (max 1000)]"]
    across = project.call("grep", pattern="greet", limit=3).splitlines()
    assert len(across) == 4 and across[-1].startswith("[more matches not shown")
    default = project.call("grep", pattern="line", path="big.txt").splitlines()
    assert len(default) == 101 and default[99] == "big.txt:100:line 100"


def test_grep_output_is_capped_at_50kb(project):
    """A thousand long matches are cut at 50 KB of output, with a note."""
    (project.root / "many.txt").write_text(("needle " + "z" * 300 + "\n") * 1000)
    out = project.call("grep", pattern="needle", path="many.txt", limit=1000)
    assert len(out.encode()) <= MAX_GREP_RESULT_BYTES
    assert out.endswith("raise limit (max 1000)]")


def test_grep_cuts_match_lines_at_500_chars(project):
    """A 5000-char matching line comes back as a short preview."""
    out = project.call("grep", pattern="greet", path="wide.txt")
    assert out.startswith("wide.txt:1:xxx") and out.endswith("[... omitted end of long line]")
    assert len(out) < 600


def test_grep_bad_regex_is_an_error_for_the_model(project):
    """An invalid regex comes back as ripgrep's one-line complaint."""
    assert project.call("grep", pattern="((") == "Error: grep failed: regex parse error: unclosed group"
    assert project.call("grep", pattern="a\nb").startswith('Error: grep failed: the literal "\\n" is not allowed')
    assert project.call("grep", pattern="a", glob="[z") == \
        "Error: grep failed: error parsing glob '[z': unclosed character class; missing ']'"


def test_grep_no_matches_and_missing_path(project):
    """No matches and a missing path are each said plainly."""
    assert project.call("grep", pattern="zzz-not-there") == "No matches for 'zzz-not-there' in .."
    assert project.call("grep", pattern="a", path="nope") == "Error: 'nope' does not exist"
    assert project.call("grep", pattern="") == "Error: pattern must not be empty"


# -- ls -------------------------------------------------------------------------------------------
def test_ls_marks_directories_sizes_and_symlinks(project):
    """ls shows dirs with '/', file sizes, and symlinks without following them."""
    lines = project.call("ls").splitlines()
    assert "src/" in lines and "notes.md  (29 bytes)" in lines and ".gitignore  (12 bytes)" in lines
    assert "leak.txt -> (symlink)" in lines and "outdir -> (symlink)" in lines
    assert project.call("ls", path="src") == "app.py  (65 bytes)\nutil/"


def test_ls_limit_says_how_many_more(project):
    """Entries past the limit are counted, not shown."""
    total = len(project.call("ls").splitlines())
    out = project.call("ls", limit=2).splitlines()
    assert len(out) == 3 and out[-1] == f"[{total - 2} more entries not shown]"


def test_ls_of_a_file_empty_dir_or_missing_path(project):
    """ls explains what it got instead of a directory."""
    (project.root / "void").mkdir()
    assert project.call("ls", path="void") == "void is an empty directory."
    assert project.call("ls", path="notes.md") == "Error: 'notes.md' is not a directory"
    assert project.call("ls", path="nope") == "Error: 'nope' does not exist"


# -- find -----------------------------------------------------------------------------------------
def test_find_matches_names_anywhere(project):
    """A pattern without '/' matches names at any depth, sorted, dirs ending with '/'."""
    assert project.call("find", pattern="*.py") == "src/app.py\nsrc/util/helpers.py\ntests/test_app.py"
    assert project.call("find", pattern="util") == "src/util/"
    assert project.call("find", pattern="*.{md,sh}") == "notes.md\npayload.sh"


def test_find_matches_paths_with_double_star(project):
    """'**' spans directories, '*' stays within one."""
    assert project.call("find", pattern="**/test_*.py") == "tests/test_app.py"
    assert project.call("find", pattern="src/**/*.py") == "src/app.py\nsrc/util/helpers.py"
    assert project.call("find", pattern="src/*.py") == "src/app.py"
    assert project.call("find", pattern="*.py", path="src/util") == "src/util/helpers.py"


def test_find_limit_and_no_match(project):
    """find caps the list with a count of the rest, and says when nothing matches."""
    assert project.call("find", pattern="*.txt", limit=2).splitlines() == [
        "-dash.txt", "big.txt", "[8 more paths not shown; narrow the pattern or raise limit (max 10000)]"]
    assert project.call("find", pattern="*.rs") == "No paths match '*.rs' in .."


def test_find_glob_that_would_backtrack_forever_answers_at_once(project):
    """A glob built to make a regular expression backtrack (each '*' retrying every split of a long name)
    is matched in linear time: find answers instead of pinning a CPU for hours."""
    (project.root / ("a" * 200)).write_text("x")
    answered = []
    worker = threading.Thread(target=lambda: answered.append(project.call("find", pattern="*a" * 12 + "b")),
                              daemon=True)
    worker.start()
    worker.join(HANG_GUARD_S)
    assert answered == ["No paths match '" + "*a" * 12 + "b' in .."]


def test_find_braces_nest_and_a_pattern_that_multiplies_is_refused(project):
    """'{a,{b,c}}' nests like a shell's; a pattern expanding to hundreds of globs is refused in one sentence."""
    assert project.call("find", pattern="{notes,{empty,big}}.{md,txt}") == "big.txt\nempty.txt\nnotes.md"
    assert project.call("find", pattern="src/**") == "src/\nsrc/app.py\nsrc/util/\nsrc/util/helpers.py"
    assert project.call("find", pattern="{a,b}" * 6) == \
        f"Error: pattern {'{a,b}' * 6!r} expands to more than 32 alternatives; use fewer braces"


def test_find_glob_details_work_as_in_a_shell(project):
    """A pattern with '/' matches whole paths in every brace alternative; '[^...]' and '[!...]' negate only
    at the start of a class; '**/**' is '**'."""
    assert project.call("find", pattern="{src/*.py,notes.md}") == "notes.md\nsrc/app.py"
    assert project.call("find", pattern="{src/util/*.py,plain.txt}") == "src/util/helpers.py"
    assert project.call("find", pattern="[^a-m]*.md") == "notes.md"
    assert project.call("find", pattern="[!a-m]*.md") == "notes.md"
    assert project.call("find", pattern="**/" * 300 + "helpers.py") == "src/util/helpers.py"


def test_find_stops_at_its_time_budget_and_says_so(project, monkeypatch):
    """However slow a pattern is to match, find answers within its time budget and says where it stopped
    (the budget is lowered to nothing here)."""
    from modes.tools import files

    monkeypatch.setattr(files, "FIND_TIME_BUDGET_S", 0.0)
    assert project.call("find", pattern="*.py") == \
        "No paths match '*.py' in the first 0 s (0 entries) of .; search a subdirectory or simplify the pattern."


def test_file_names_that_are_not_utf8_reach_the_model_as_escapes(contained_project):
    """A name that is not UTF-8 is shown with \\x escapes, so the next model request can still be encoded
    (a lone surrogate ended the run)."""
    os.close(os.open(os.path.join(os.fsencode(contained_project.root), b"caf\xe9.txt"), os.O_CREAT | os.O_WRONLY))
    contained_project.workspace.after_prepare()
    listing = contained_project.call("ls", path=".")
    found = contained_project.call("find", pattern="caf*")
    assert "caf\\xe9.txt  (0 bytes)" in listing.splitlines()
    assert found == "caf\\xe9.txt"
    json.dumps(listing + found, ensure_ascii=False).encode("utf-8")  # what a model request does with them


# -- containment: hostile calls ----------------------------------------------------------------
HOSTILE_CALLS = [
    ("read", {"path": ".."}),
    ("read", {"path": "../../etc/passwd"}),
    ("read", {"path": "../../../../../../../../etc/passwd"}),
    ("read", {"path": "/etc/passwd"}),
    ("read", {"path": "leak.txt"}),
    ("read", {"path": "relleak.txt"}),
    ("read", {"path": "outdir/canary.txt"}),
    ("read", {"path": "../outside/canary.txt"}),
    ("read", {"path": "nest/.gitignore"}),
    ("read", {"path": "notes.md\u0000/../leak.txt"}),
    ("read", {"path": "-dash.txt/../../outside/canary.txt"}),
    ("grep", {"pattern": "CANARY"}),
    ("grep", {"pattern": "CANARY", "path": "outdir"}),
    ("grep", {"pattern": "CANARY", "path": ".."}),
    ("grep", {"pattern": "CANARY", "path": "/"}),
    ("grep", {"pattern": "CANARY", "path": "leak.txt"}),
    ("grep", {"pattern": "CANARY", "path": "relleak.txt"}),
    ("grep", {"pattern": "CANARY", "path": "nest/inner"}),
    ("grep", {"pattern": "zzz-none", "path": "nest/inner"}),
    ("grep", {"pattern": "--pre=sh", "path": "."}),
    ("grep", {"pattern": "--files"}),
    ("grep", {"pattern": "-L", "path": "outdir"}),
    ("grep", {"pattern": "CANARY", "glob": "--follow"}),
    ("grep", {"pattern": "CANARY", "glob": "-L"}),
    ("grep", {"pattern": "CANARY", "path": "--follow"}),
    ("grep", {"pattern": "CANARY\u0000"}),
    ("grep", {"pattern": "CANARY", "glob": "*\u0000"}),
    ("ls", {"path": "outdir"}),
    ("ls", {"path": ".."}),
    ("ls", {"path": "/"}),
    ("ls", {"path": "../outside"}),
    ("find", {"pattern": "*canary*"}),
    ("find", {"pattern": "*canary*", "path": "outdir"}),
    ("find", {"pattern": "*", "path": ".."}),
    ("find", {"pattern": "../*"}),
]


@pytest.mark.parametrize("name, arguments", HOSTILE_CALLS, ids=[f"{n}-{a}" for n, a in HOSTILE_CALLS])
def test_hostile_call_reveals_nothing_outside(contained_project, name, arguments):
    """Escapes through links, '..', absolute paths, NUL bytes and option-like input show no byte from outside."""
    before = contained_project.files_outside()
    out = contained_project.tools[name].invoke(json.dumps(arguments))
    assert contained_project.canary not in out
    assert "root:x:0:0" not in out and str(contained_project.outside) not in out
    assert contained_project.files_outside() == before


def test_refusals_tell_the_model_why(contained_project):
    """Each escape is refused with a sentence the model can act on."""
    assert contained_project.call("read", path="leak.txt") == "Error: 'leak.txt' is outside the workspace"
    assert contained_project.call("read", path="../../etc/passwd") == "Error: '../../etc/passwd' is outside the workspace"
    assert contained_project.call("read", path="/etc/passwd") == \
        "Error: '/etc/passwd' is absolute; use a path relative to the workspace root"
    assert contained_project.call("read", path="a\u0000b") == "Error: path contains a NUL byte"
    assert contained_project.call("ls", path="outdir") == "Error: 'outdir' is outside the workspace"
    assert contained_project.call("grep", pattern="x\u0000") == "Error: pattern contains a NUL byte"
    assert contained_project.call("find", pattern="*", path="..") == "Error: '..' is outside the workspace"


def test_sibling_prefix_path_is_refused(contained_project):
    """'<root>2' shares the root's name as a prefix but is outside: every tool refuses it."""
    escape = f"../{contained_project.sibling.name}/secret.txt"
    for name, arguments in (("read", {"path": escape}),
                            ("grep", {"pattern": "CANARY", "path": escape}),
                            ("ls", {"path": f"../{contained_project.sibling.name}"}),
                            ("find", {"pattern": "*", "path": f"../{contained_project.sibling.name}"})):
        assert contained_project.tools[name].invoke(json.dumps(arguments)) == \
            f"Error: {arguments['path']!r} is outside the workspace"


def test_grep_never_follows_a_symlinked_directory_out(contained_project):
    """Searching the whole workspace for the canary finds nothing: ripgrep does not follow links."""
    assert contained_project.call("grep", pattern=contained_project.canary) == f"No matches for {contained_project.canary!r} in .."
    assert contained_project.call("grep", pattern=contained_project.canary, glob="outdir/**") == \
        f"No matches for {contained_project.canary!r} in .."


def test_grep_pattern_that_looks_like_an_option_is_searched_for(contained_project):
    """'--files' and '--pre=sh' are patterns to find, not options: they match the text holding them."""
    assert contained_project.call("grep", pattern="--files") == "options.txt:1:rg takes --files and --pre=sh as options"
    assert contained_project.call("grep", pattern="--pre=sh") == "options.txt:1:rg takes --files and --pre=sh as options"
    assert not (contained_project.outside / "planted-by-payload").exists()


def test_paths_that_look_like_options_are_paths(contained_project):
    """A file named '-dash.txt' is read, searched and found like any other."""
    assert contained_project.call("read", path="-dash.txt") == "     1\ta dash greeting"
    assert contained_project.call("grep", pattern="dash", path="-dash.txt") == "-dash.txt:1:a dash greeting"
    assert contained_project.call("find", pattern="-*") == "-dash.txt"
    assert contained_project.call("grep", pattern="x", path="--files") == "Error: '--files' does not exist"


def test_ignore_file_linked_out_is_never_quoted(contained_project):
    """A .gitignore linking to a host file is never echoed back, even when ripgrep cannot parse it."""
    out = contained_project.call("grep", pattern="zzz-none", path="nest/inner")
    assert out == "No matches for 'zzz-none' in nest/inner."
