"""The git tools, driven the way the agent drives them: `Tool.invoke` with JSON,
over a real clone in a LocalWorkspace, including hostile calls and a hostile
repository configuration, which run in the Docker sandbox too."""

from __future__ import annotations

import json
import os
from pathlib import Path

import attrs
import pytest

from modes.clone import clone_repository
from modes.tools.git import MAX_GIT_OUTPUT_BYTES, git_tools
from sandbox.local import LocalWorkspace
from sandbox.workspace import Command, Workspace
from tests.support.docker_engine import docker_engine, docker_settings, sandbox  # noqa: F401
from tests.support.git_repos import TEST_BLOB_LIMIT, git, source_repo  # noqa: F401
from tests.support.workspaces import backend_workspace, private_tmpdir  # noqa: F401

CANARY = "CANARY-outside-7f3a9c"


def open_workspace(root: Path, source: Path, **clone_options) -> LocalWorkspace:
    root.mkdir()
    workspace = LocalWorkspace("repo", root)
    clone_repository(str(source), root, **clone_options)
    return workspace


@pytest.fixture
def outside(tmp_path) -> Path:
    """A directory next to the workspace holding a canary the tools must never show."""
    directory = tmp_path / "outside"
    directory.mkdir()
    (directory / "canary.txt").write_text(f"{CANARY}\n")
    return directory


@pytest.fixture
def workspace(tmp_path, source_repo, outside):
    """A full clone of the source repository in a LocalWorkspace under tmp_path."""
    workspace = open_workspace(tmp_path / "workspace", source_repo.path, full=True)
    yield workspace
    workspace.close()


@pytest.fixture
def tools(workspace):
    return {t.name: t for t in git_tools(workspace)}


def call(tools, name: str, **arguments) -> str:
    return tools[name].invoke(json.dumps(arguments))


# -- happy paths ---------------------------------------------------------------


def test_the_six_git_tools_have_fixed_names_and_schemas(tools):
    """The model sees exactly these tools, with snake_case parameters."""
    assert sorted(tools) == ["git_blame", "git_checkout", "git_diff", "git_log", "git_refs", "git_show"]
    parameters = tools["git_log"].schema()["function"]["parameters"]["properties"]
    assert list(parameters) == ["ref", "path", "limit", "author", "since", "grep"]


def test_git_log_lists_one_line_per_commit_newest_first(tools, source_repo):
    """git_log shows short id, date, author and subject for each commit."""
    lines = call(tools, "git_log").splitlines()
    assert len(lines) == 3
    assert lines[0] == f"{source_repo.commits[2][:7]} 2024-03-01 [Alice Example] Vendor lib and add data"
    assert lines[2].endswith("[Alice Example] Initial commit")


def test_git_log_filters_by_path_author_since_grep_and_limit(tools):
    """Each filter narrows the listing."""
    assert "Add guide" in call(tools, "git_log", path="docs/guide.md")
    assert len(call(tools, "git_log", path="docs").splitlines()) == 1
    assert all("[Bob Builder]" in line for line in call(tools, "git_log", author="Bob").splitlines())
    assert len(call(tools, "git_log", since="2024-01-15").splitlines()) == 2
    assert "Initial commit" in call(tools, "git_log", grep="Initial")
    assert len(call(tools, "git_log", limit=1).splitlines()) == 1
    assert "Add feature flag" in call(tools, "git_log", ref="feature")


def test_git_log_limit_must_be_between_1_and_200(tools):
    """A limit outside 1..200 is refused."""
    assert call(tools, "git_log", limit=0).startswith("Error: limit must be between 1 and 200")
    assert call(tools, "git_log", limit=201).startswith("Error:")


def test_git_log_says_when_a_shallow_clone_hides_history(tmp_path, source_repo):
    """In a shallow clone the log says older history is missing."""
    workspace = open_workspace(tmp_path / "shallow", source_repo.path)
    try:
        output = call({t.name: t for t in git_tools(workspace)}, "git_log")
    finally:
        workspace.close()
    assert len(output.splitlines()) == 2 and "shallow clone" in output


def test_git_show_shows_a_commit_with_stat_and_patch(tools, source_repo):
    """git_show of a commit has its message, the changed-file summary and the patch."""
    output = call(tools, "git_show", ref=source_repo.commits[1][:10])
    assert "Add guide and greeting" in output
    assert "docs/guide.md | 3 +++" in output
    assert "+def greet():" in output


def test_git_show_shows_a_file_at_a_ref(tools):
    """git_show with a path, or REF:PATH, prints the file as it was."""
    assert call(tools, "git_show", ref="v0.1", path="src/app.py") == "def main():\n    return 1"
    assert call(tools, "git_show", ref="v0.1:src/app.py") == "def main():\n    return 1"
    assert "app.py" in call(tools, "git_show", ref="v0.1:src")


def test_git_show_does_not_dump_binary_files(tools):
    """A binary blob is described, not printed."""
    assert call(tools, "git_show", ref="HEAD", path="big.bin") == "big.bin at HEAD is a binary file; not shown"


def test_git_blame_shows_authors_for_a_line_range(tools):
    """git_blame attributes each requested line to its commit and author."""
    output = call(tools, "git_blame", path="src/app.py", start_line=1, end_line=2)
    lines = output.splitlines()
    assert len(lines) == 2
    assert "Alice Example" in lines[0] and "Bob Builder" in lines[1]
    assert call(tools, "git_blame", path="src/app.py", start_line=50).startswith("Error:")
    assert call(tools, "git_blame", path="src/app.py", start_line=3, end_line=2).startswith("Error:")


def test_git_diff_between_two_refs_has_a_summary_and_a_patch(tools):
    """git_diff shows the --stat summary then the patch, optionally for one path."""
    output = call(tools, "git_diff", from_ref="v0.1", to_ref="v1.0", path="src")
    assert output.splitlines()[0].strip().startswith("src/app.py |")
    assert "-    return 1" in output and "+    return greet()" in output
    assert "README.md" not in output
    assert call(tools, "git_diff", from_ref="HEAD") == "no differences"


def test_git_refs_lists_branches_and_tags(tools, source_repo):
    """git_refs shows HEAD, the branches and both kinds of tag, peeled to commits."""
    output = call(tools, "git_refs")
    assert output.splitlines()[0].startswith("HEAD: ") and "(branch main)" in output
    assert f"origin/feature  {source_repo.feature_commit[:7]}" in output
    assert f"v1.0  {source_repo.commits[2][:7]}" in output
    assert f"v0.1  {source_repo.commits[0][:7]}" in output
    assert "v0.1" not in call(tools, "git_refs", kind="branches")
    assert "origin/feature" not in call(tools, "git_refs", kind="tags")


def test_git_checkout_changes_what_the_file_tools_see(tools, workspace, source_repo):
    """After git_checkout the workspace files are those of the checked-out commit."""
    output = call(tools, "git_checkout", ref="v0.1")
    assert output.startswith(f"HEAD is now at {source_repo.commits[0][:7]} Initial commit")
    assert workspace.read_bytes("src/app.py", 1000).data == b"def main():\n    return 1\n"
    assert "(detached)" in call(tools, "git_refs")
    call(tools, "git_checkout", ref="feature")
    assert workspace.read_bytes("feature.txt", 100).data == b"flag = on\n"


def test_large_output_is_cut_and_says_so(tmp_path, source_repo):
    """Output past the cap is cut with a note telling the model how to narrow it."""
    repo = tmp_path / "large-source"
    git("clone", "-q", str(source_repo.path), str(repo), cwd=tmp_path)
    (repo / "huge.txt").write_text("".join(f"line {n}\n" for n in range(20_000)))
    git("add", "huge.txt", cwd=repo)
    git("-c", "user.name=C", "-c", "user.email=c@example.com", "commit", "-q", "-m", "huge", cwd=repo)
    workspace = open_workspace(tmp_path / "large", repo)
    try:
        output = call({t.name: t for t in git_tools(workspace)}, "git_show", ref="HEAD")
    finally:
        workspace.close()
    assert len(output.encode()) < MAX_GIT_OUTPUT_BYTES + 200
    assert f"[output cut at {MAX_GIT_OUTPUT_BYTES} bytes" in output


def test_blobs_left_out_of_a_partial_clone_are_never_downloaded(tmp_path, source_repo):
    """A blob above the blob limit that the clone skipped gives an error, not a network fetch."""
    workspace = open_workspace(tmp_path / "partial", source_repo.path, full=True, ref="feature",
                               blob_limit=TEST_BLOB_LIMIT)
    try:
        output = call({t.name: t for t in git_tools(workspace)}, "git_show", ref="main", path="big.bin")
    finally:
        workspace.close()
    assert output.startswith("Error:") and "blob limit" in output


# -- hostile calls, on both backends ---------------------------------------------


@attrs.frozen
class Contained:
    """A full clone in a workspace of one backend, and a directory for hostile
    programs: `planted` on the host, `seen_as` where the tools' git sees it
    (outside the workspace locally; inside the workspace in a container, the
    only place a container's git could find one)."""

    workspace: Workspace
    tools: dict
    planted: Path
    seen_as: str


@pytest.fixture
def contained(backend_workspace, source_repo, outside, sandbox) -> Contained:
    workspace = backend_workspace
    clone_repository(str(source_repo.path), workspace.host_dir, full=True)
    os.symlink(outside / "canary.txt", workspace.host_dir / "escape.txt")
    os.symlink(outside, workspace.host_dir / "escape-dir")
    os.symlink("/etc/passwd", workspace.host_dir / "passwd-link")
    if sandbox == "docker":
        planted, seen_as = workspace.host_dir / ".hostile", "/workspace/.hostile"
    else:
        planted = outside / "hostile"
        seen_as = str(planted)
    planted.mkdir()
    planted.chmod(0o777)  # the sandbox user's git must be able to leave its marker
    workspace.after_prepare()
    return Contained(workspace, {t.name: t for t in git_tools(workspace)}, planted, seen_as)


def _planted_anywhere(workspace: Workspace) -> str:
    """Files named pwned* wherever the tools run: in /tmp there, or in the workspace."""
    result = workspace.run(Command(["find", "/tmp", ".", "-name", "pwned*"]))
    return result.stdout.decode()


HOSTILE_CALLS = [
    ("git_log", {"ref": "--output=/tmp/pwned-git-log"}),
    ("git_log", {"since": "--output=/tmp/pwned-git-log"}),
    ("git_log", {"grep": "x\n--output=/tmp/pwned"}),
    ("git_log", {"path": "../outside/canary.txt"}),
    ("git_log", {"path": "escape-dir"}),
    ("git_show", {"ref": "--output=/tmp/pwned-git-show"}),
    ("git_show", {"ref": "HEAD:../../etc/passwd"}),
    ("git_show", {"ref": "HEAD:../outside/canary.txt"}),
    ("git_show", {"ref": "HEAD", "path": "/etc/passwd"}),
    ("git_show", {"ref": "HEAD", "path": "escape.txt"}),
    ("git_show", {"ref": "HEAD", "path": "passwd-link"}),
    ("git_show", {"ref": "HEAD", "path": "escape-dir/canary.txt"}),
    ("git_show", {"ref": "HEAD", "path": ".git/config"}),
    ("git_show", {"ref": "HEAD\x00--output=/tmp/pwned"}),
    ("git_blame", {"path": "../outside/canary.txt"}),
    ("git_blame", {"path": "escape.txt"}),
    ("git_blame", {"path": "passwd-link"}),
    ("git_blame", {"path": "README.md", "ref": "--contents=/etc/passwd"}),
    ("git_diff", {"from_ref": "--no-index", "to_ref": "/etc/passwd"}),
    ("git_diff", {"from_ref": "--output=/tmp/pwned-git-diff"}),
    ("git_diff", {"from_ref": "HEAD", "to_ref": "--ext-diff"}),
    ("git_diff", {"from_ref": "HEAD~1..HEAD"}),
    ("git_diff", {"from_ref": "HEAD", "path": "../outside"}),
    ("git_diff", {"from_ref": "HEAD", "path": "escape-dir"}),
    ("git_checkout", {"ref": "--orphan=x"}),
    ("git_checkout", {"ref": "-f"}),
    ("git_checkout", {"ref": "README.md"}),
    ("git_checkout", {"ref": "HEAD -- README.md"}),
    ("git_refs", {"kind": "--format=%(contents)"}),
]


@pytest.mark.parametrize(("name", "arguments"), HOSTILE_CALLS, ids=[f"{n}:{a}" for n, a in HOSTILE_CALLS])
def test_hostile_tool_calls_are_refused_without_leaking_or_writing(contained, tmp_path, name, arguments):
    """Options in values, ranges, and paths leading out are refused; nothing outside is read or written."""
    before = sorted(os.listdir(tmp_path))
    output = call(contained.tools, name, **arguments)
    assert output.startswith("Error:"), output
    assert CANARY not in output and "root:x:0" not in output
    assert sorted(os.listdir(tmp_path)) == before
    assert _planted_anywhere(contained.workspace) == ""
    assert not any(p.name.startswith("pwned") for p in Path("/tmp").iterdir())


def test_filter_values_that_look_like_options_stay_patterns(contained, tmp_path):
    """An author or grep value spelled like an option is matched as text, never obeyed."""
    before = sorted(os.listdir(tmp_path))
    assert call(contained.tools, "git_log", author="--output=/tmp/pwned-author") == "no commits match"
    assert call(contained.tools, "git_log", grep="--all") == "no commits match"
    assert sorted(os.listdir(tmp_path)) == before
    assert _planted_anywhere(contained.workspace) == ""


def test_unknown_ref_points_the_model_at_git_refs(tools):
    """A ref that resolves to nothing gets a message naming git_refs."""
    assert call(tools, "git_log", ref="no-such-branch") == "Error: unknown ref 'no-such-branch' (try git_refs)"


def test_path_outside_gets_the_containment_message(contained):
    """A path leaving the workspace is refused with the workspace's own message."""
    assert call(contained.tools, "git_log", path="../x") == "Error: '../x' is outside the workspace"


# -- hostile repository configuration ----------------------------------------------


@pytest.fixture
def hostile_config(contained) -> Path:
    """Rewrite the workspace's .git as a compromised tree would: every program-running
    key points at a script that leaves a marker where the test can see it."""
    planted, seen_as = contained.planted, contained.seen_as
    marker = planted / "hostile-program-ran"
    evil = f"{seen_as}/evil.sh"
    (planted / "evil.sh").write_text(f"#!/bin/sh\necho \"$0 $*\" >> '{seen_as}/{marker.name}'\ncat\n")
    (planted / "evil.sh").chmod(0o755)
    hooks = planted / "hooks"
    hooks.mkdir()
    git_dir = contained.workspace.host_dir / ".git"
    for directory in (hooks, git_dir / "hooks"):
        directory.mkdir(exist_ok=True)
        for hook_name in ("post-checkout", "reference-transaction", "post-index-change", "fsmonitor-watchman"):
            (directory / hook_name).write_text(f"#!/bin/sh\n'{evil}' hook </dev/null\n")
            (directory / hook_name).chmod(0o755)
    (planted / "attributes").write_text("* filter=evil diff=evil\n")
    (git_dir / "info").mkdir(exist_ok=True)
    # A driver name with '=' would split a `-c key=value` override in the wrong place.
    (git_dir / "info" / "attributes").write_text("* filter=evil diff=evil\nREADME.md filter=odd=name\n")
    with (git_dir / "config").open("a") as config:
        config.write(
            f"[core]\n\tfsmonitor = {evil}\n\tpager = {evil}\n\thooksPath = {seen_as}/hooks\n"
            f"\tsshCommand = {evil}\n\tattributesFile = {seen_as}/attributes\n\tworktree = {seen_as}\n"
            f"[diff]\n\texternal = {evil}\n\torderFile = /etc/passwd\n"
            f'[diff "evil"]\n\ttextconv = {evil}\n\tcommand = {evil}\n'
            f'[filter "evil"]\n\tsmudge = {evil}\n\tclean = {evil}\n\trequired = true\n'
            f'[filter "odd=name"]\n\tsmudge = {evil}\n\tclean = {evil}\n\trequired = true\n'
            f"[log]\n\tshowSignature = true\n[gpg]\n\tprogram = {evil}\n"
            f"[mailmap]\n\tfile = /etc/passwd\n"
            f"[submodule]\n\trecurse = true\n[protocol]\n\tallow = always\n"
            f"[color]\n\tui = always\n[pager]\n\tlog = {evil}\n\tdiff = {evil}\n"
        )
    contained.workspace.after_prepare()  # what was written is the sandbox user's, like the rest
    return marker


def test_hostile_repository_config_cannot_run_programs(contained, hostile_config, source_repo):
    """With hooks, fsmonitor, pager, external diff, textconv and filters pointing at a
    script, no tool runs it, and the tools still work inside the workspace."""
    tools = contained.tools
    before = sorted(os.listdir(contained.planted))
    assert "Vendor lib" in call(tools, "git_log")
    assert "+def greet():" in call(tools, "git_show", ref=source_repo.commits[1])
    assert call(tools, "git_show", ref="v0.1", path="src/app.py") == "def main():\n    return 1"
    assert "Bob Builder" in call(tools, "git_blame", path="src/app.py")
    assert "+    return greet()" in call(tools, "git_diff", from_ref="v0.1", to_ref="HEAD")
    assert call(tools, "git_checkout", ref="v0.1").startswith("HEAD is now at")
    assert "README.md" in call(tools, "git_diff", from_ref="v1.0")
    assert call(tools, "git_checkout", ref="feature").startswith("HEAD is now at")
    assert "v1.0" in call(tools, "git_refs")
    assert not hostile_config.exists()
    assert sorted(os.listdir(contained.planted)) == before
    assert (contained.workspace.host_dir / "feature.txt").exists()

    # The control: plain git, where the tools run, in the same repository does run the script.
    contained.workspace.run(Command(["git", "checkout", "-q", "--detach", "v0.1"]))
    assert hostile_config.exists()


def test_hostile_remote_url_is_never_contacted(backend_workspace, source_repo, outside, sandbox):
    """A partial clone whose remote became an ext:: command does not run it to fetch missing blobs."""
    workspace = backend_workspace
    marker = (workspace.host_dir / "ext-ran") if sandbox == "docker" else (outside / "ext-ran")
    seen_as = "/workspace/ext-ran" if sandbox == "docker" else str(marker)
    clone_repository(str(source_repo.path), workspace.host_dir, full=True, ref="feature", blob_limit=TEST_BLOB_LIMIT)
    with (workspace.host_dir / ".git" / "config").open("a") as config:
        config.write(f"[protocol]\n\tallow = always\n[remote \"origin\"]\n\turl = ext::sh -c 'touch {seen_as}'\n")
    workspace.after_prepare()
    tools = {t.name: t for t in git_tools(workspace)}
    assert call(tools, "git_checkout", ref="main").startswith("Error:")
    assert call(tools, "git_show", ref="main:big.bin").startswith("Error:")
    assert not marker.exists()


def test_blame_refuses_a_config_that_reads_a_file_outside(contained):
    """blame.ignoreRevsFile would echo a file outside in git's error, so git_blame refuses it."""
    with (contained.workspace.host_dir / ".git" / "config").open("a") as config:
        config.write("[blame]\n\tignoreRevsFile = /etc/passwd\n")
    output = call(contained.tools, "git_blame", path="README.md")
    assert output.startswith("Error: git_blame is unavailable")
    assert "root:x:0" not in output


def test_workspace_git_dir_symlinked_out_is_refused(tmp_path, source_repo, outside):
    """A .git that is a symlink to a repository outside the workspace is not used."""
    root = tmp_path / "linked"
    root.mkdir()
    os.symlink(source_repo.path / ".git", root / ".git")
    workspace = LocalWorkspace("repo", root)
    try:
        output = call({t.name: t for t in git_tools(workspace)}, "git_log")
    finally:
        workspace.close()
    assert output.startswith("Error:")


def test_configuration_a_checkout_brings_in_is_neutralised_before_the_next_call(contained):
    """The configuration is read again after git_checkout: a filter defined in a file that only the checked-out
    branch has (and that .git/config includes) is overridden before git_diff cleans the modified work tree."""
    root, planted, seen_as = contained.workspace.host_dir, contained.planted, contained.seen_as
    marker = planted / "filter-ran"
    (planted / "evil.sh").write_text(f"#!/bin/sh\necho ran >> '{seen_as}/filter-ran'\ncat\n")
    (planted / "evil.sh").chmod(0o755)
    # The tree may already be the sandbox user's: this git, on the host, is told to trust it.
    host_git = lambda *args: git("-c", "safe.directory=*", *args, cwd=root)  # noqa: E731
    host_git("checkout", "--quiet", "-b", "hostile")
    (root / "evil.cfg").write_text(f'[filter "evil"]\n\tclean = {seen_as}/evil.sh\n')
    (root / ".gitattributes").write_text("* filter=evil\n")
    host_git("add", "evil.cfg", ".gitattributes")
    host_git("-c", "user.name=x", "-c", "user.email=x@x", "commit", "--quiet", "-m", "hostile")
    host_git("checkout", "--quiet", "main")
    with (root / ".git" / "config").open("a") as config:
        config.write("[include]\n\tpath = ../evil.cfg\n")
    contained.workspace.after_prepare()

    assert "Vendor lib" in call(contained.tools, "git_log")  # read on main, where evil.cfg does not exist
    assert call(contained.tools, "git_checkout", ref="hostile").startswith("HEAD is now at")
    with (root / "README.md").open("a") as readme:
        readme.write("changed\n")
    assert "+changed" in call(contained.tools, "git_diff", from_ref="HEAD")
    assert not marker.exists()

    # The control: plain git, where the tools run, does run the filter.
    contained.workspace.run(Command(["git", "diff", "HEAD"]))
    assert marker.exists()
