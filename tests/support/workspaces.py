"""LocalWorkspaces for tests: an empty one, and one holding a small project
with hostile links, next to canary files outside it that no tool may reveal.

Each workspace is created under a private $TMPDIR inside the test's tmp_path,
so "did anything appear outside the workspace?" can be answered exactly
(a shared /tmp changes under other tests' feet).

The project tree (workspace root):

    src/app.py, src/util/helpers.py, tests/test_app.py, notes.md
    big.txt        5000 numbered lines          wide.txt    a 5000-char line
    blob.bin       NUL bytes (binary)           noise.dat   undecodable, no NUL
    latin1.txt     one stray Latin-1 byte       empty.txt   nothing
    .gitignore     ignores ignored.txt          ignored.txt a match to be skipped
    -dash.txt      a name that looks like an option
    options.txt    text holding '--files' and '--pre=sh'
    payload.sh     a script that would plant a file outside, if anything ran it
    inside-link -> src/app.py                   (fine: stays inside)
    leak.txt    -> <outside>/canary.txt         (absolute link out)
    relleak.txt -> ../../outside/canary.txt     (relative link out)
    outdir      -> <outside>                    (directory link out)
    nest/.gitignore -> <outside>/ignore-rules   (an ignore file out, quoting the canary)
    nest/inner/plain.txt

Outside: <tmp>/outside/{canary.txt, ignore-rules} and the sibling-prefix
directory <root>2/secret.txt, all holding the canary text.
"""

from __future__ import annotations

import json
import os
import secrets
import tempfile
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest

from modes.base import Sources
from modes.tools.definition import Tool
from modes.tools.files import file_tools
from sandbox.local import LocalWorkspace
from sandbox.workspace import Workspace

BIG_FILE_LINES = 5_000
WIDE_LINE_CHARS = 5_000


@pytest.fixture
def private_tmpdir(tmp_path, monkeypatch) -> Path:
    """$TMPDIR for this test alone: LocalWorkspace.open creates its directory here."""
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmpdir))
    monkeypatch.setattr(tempfile, "tempdir", None)  # make tempfile read TMPDIR again
    return tmpdir


@pytest.fixture
def workspace(private_tmpdir):
    """An empty LocalWorkspace, closed (removed) after the test."""
    opened = LocalWorkspace.open("repo")
    yield opened
    opened.close()


@attrs.frozen
class Project:
    """A workspace holding the project tree above, its file tools, and what lies outside."""

    workspace: Workspace
    tools: dict[str, Tool]
    sources: Sources
    canary: str  # text found only outside the workspace
    outside: Path  # directory outside holding canary.txt and ignore-rules
    sibling: Path  # <root>2, the sibling-prefix directory
    base: Path  # the test's tmp_path: everything the test created lives below it

    @property
    def root(self) -> Path:
        return self.workspace.host_dir

    def call(self, name: str, **arguments) -> str:
        """Call a tool as the model does: JSON arguments in, text out."""
        return self.tools[name].invoke(json.dumps(arguments))

    def files_outside(self) -> set[str]:
        """Every path under the test's tmp_path that is not in the workspace."""
        root = str(self.root)
        found = set()
        for directory, subdirectories, files in os.walk(self.base):
            subdirectories[:] = [d for d in subdirectories if os.path.join(directory, d) != root]
            found.update(os.path.join(directory, name) for name in subdirectories + files)
        return found


@pytest.fixture
def project(tmp_path, private_tmpdir, workspace) -> Project:
    """The project tree above in a LocalWorkspace, with read/grep/ls/find built over it."""
    return _project(workspace, tmp_path)


@pytest.fixture
def backend_workspace(request, private_tmpdir, sandbox) -> Iterator[Workspace]:
    """An empty repo-mode workspace of each backend (the `sandbox` parameter),
    under the test's private $TMPDIR, not yet prepared; closed after the test."""
    from config.schema import SandboxSettings
    from sandbox import open_workspace

    settings = request.getfixturevalue("docker_settings") if sandbox == "docker" else SandboxSettings()
    opened = open_workspace("repo", settings)
    yield opened
    opened.close()


@pytest.fixture
def contained_project(tmp_path, backend_workspace) -> Project:
    """The project tree above in a workspace of each backend: the containment
    tests must hold wherever the tools run."""
    return _project(backend_workspace, tmp_path)


def _project(workspace: Workspace, tmp_path: Path) -> Project:
    canary = f"CANARY-{secrets.token_hex(8)}"
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "canary.txt").write_text(canary + "\n")
    # An unclosed '{' makes ripgrep quote this line in a parse error, if it reports one.
    (outside / "ignore-rules").write_text("{" + canary + "\n")
    root = workspace.host_dir
    _write_tree(root, outside)
    sibling = Path(str(root) + "2")
    sibling.mkdir()
    (sibling / "secret.txt").write_text(canary + "\n")
    workspace.after_prepare()
    sources = Sources()
    tools = {built.name: built for built in file_tools(workspace, sources)}
    return Project(workspace=workspace, tools=tools, sources=sources, canary=canary,
                   outside=outside, sibling=sibling, base=tmp_path)


def _write_tree(root: Path, outside: Path) -> None:
    files = {
        "src/app.py": "def main():\n    return greet()\n\n\ndef greet():\n    return 'hello'\n",
        "src/util/helpers.py": "def helper():\n    return 'greet helper'\n",
        "tests/test_app.py": "from src.app import greet\n\n\ndef test_greet():\n    assert greet() == 'hello'\n",
        "notes.md": "# Notes\nGreet people kindly.\n",
        "big.txt": "".join(f"line {n}\n" for n in range(1, BIG_FILE_LINES + 1)),
        "wide.txt": "x" * WIDE_LINE_CHARS + " greet\nshort\n",
        "empty.txt": "",
        ".gitignore": "ignored.txt\n",
        "ignored.txt": "greet from an ignored file\n",
        "-dash.txt": "a dash greeting\n",
        "options.txt": "rg takes --files and --pre=sh as options\n",
        "payload.sh": f"touch '{outside}/planted-by-payload'\n",
        "nest/inner/plain.txt": "plain text\n",
    }
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    (root / "blob.bin").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00greet")
    (root / "noise.dat").write_bytes(bytes(range(0x80, 0x100)) * 8)
    (root / "latin1.txt").write_bytes(b"caf\xe9 au lait\n")
    os.symlink("src/app.py", root / "inside-link")
    os.symlink(outside / "canary.txt", root / "leak.txt")
    os.symlink(os.path.relpath(outside / "canary.txt", root), root / "relleak.txt")
    os.symlink(outside, root / "outdir")
    os.symlink(outside / "ignore-rules", root / "nest" / ".gitignore")


# Deeper than Python's default recursion limit (1,000): os.walk and shutil.rmtree recurse per level.
DEEP_TREE_LEVELS = 1_500


def make_deep_tree(root: Path, levels: int = DEEP_TREE_LEVELS) -> None:
    """root/d/d/.../d, `levels` deep, as a hostile repository could hold. Made
    by descriptor: the path soon outgrows PATH_MAX."""
    descriptor = os.open(root, os.O_RDONLY)
    try:
        for _ in range(levels):
            os.mkdir("d", dir_fd=descriptor)
            deeper = os.open("d", os.O_RDONLY, dir_fd=descriptor)
            os.close(descriptor)
            descriptor = deeper
    finally:
        os.close(descriptor)
