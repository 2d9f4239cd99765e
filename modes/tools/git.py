"""Git tools for repo mode: log, show, blame, diff, refs and checkout.

They are contained like the file tools. The model supplies values, never
options: every ref is checked and resolved to a commit id before git sees it,
every path is resolved through the workspace and passed after `--`, and git
runs only through `workspace.run`, so the same code works in a container.

The repository itself is untrusted too. Its `.git/config` could name programs
for git to run (hooks, fsmonitor, pager, external diff, textconv, filters) or
files outside the workspace to read; the command-line configuration below
outranks it, and the program-running keys it sets are overridden one by one
(see `_neutralising_environment`).
"""

from __future__ import annotations

import contextlib
import posixpath
import re
import threading
from collections.abc import Iterator
from typing import Annotated, Literal

from dispatcher.errors import ToolInputError
from modes.tools.definition import Tool, tool
from sandbox.workspace import Command, Workspace

MAX_GIT_OUTPUT_BYTES = 50_000
GIT_TIMEOUT_S = 30.0
MAX_LOG_LIMIT = 200
MAX_REFS_LISTED = 300
MAX_REF_CHARS = 256
MAX_FILTER_CHARS = 200
# A blob with a NUL byte in its first bytes is shown as "binary", like git diff does.
BINARY_SNIFF_BYTES = 8_000

# Options before the subcommand for every git we run. The repository is the
# workspace root, named explicitly so git never searches the parent
# directories; pathspecs are literal, so ':(glob)' and friends are plain names.
_GIT_PREFIX = ("git", "--no-pager", "--literal-pathspecs", "--git-dir=.git", "--work-tree=.")
# Command-line configuration outranks the repository's own file.
_FIXED_CONFIG = (
    "core.hooksPath=/dev/null",  # no hooks (post-checkout!)
    "core.fsmonitor=false",  # no fsmonitor program on index refresh
    "protocol.allow=never",  # no network, not even a partial clone's lazy fetch
    "core.sshCommand=false",
    "core.pager=cat",
    "diff.external=",
    "core.attributesFile=/dev/null",  # no attributes from outside the workspace
    "log.showSignature=false",  # would run gpg.program
    "submodule.recurse=false",
    "color.ui=never",
    "core.quotePath=false",
    # The workspace may belong to another uid (a container's), and we neutralise
    # the repository's configuration ourselves.
    "safe.directory=*",
)
# Keys in the repository's configuration that name a program or a host file,
# and the value that defuses each. Matched against `git config --name-only`
# output: section and key lowercased, subsection (the driver name) verbatim.
_NEUTRALISED_KEYS = (
    (re.compile(r"filter\..+\.(clean|smudge|process)", re.S), ""),
    (re.compile(r"filter\..+\.required", re.S), "false"),
    (re.compile(r"diff\..+\.(textconv|command)", re.S), ""),
    (re.compile(r"merge\..+\.driver", re.S), ""),
    (re.compile(r"gpg\.(.+\.)?program", re.S), "false"),
    (re.compile(r"mailmap\.file|diff\.orderfile|core\.excludesfile", re.S), "/dev/null"),
)
# Multi-valued keys naming files git reads (and echoes in its errors) that a
# command-line value cannot cancel: the tool refuses instead.
_REFUSED_KEYS = {"blame.ignorerevsfile": "git_blame"}

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_SHALLOW_NOTE = "(shallow clone: older history is not available)"


def git_tools(workspace: Workspace) -> list[Tool]:
    """The git tools, closed over `workspace` (whose root is the repository)."""
    repository = _Repository(workspace)

    @tool
    def git_log(
        ref: Annotated[str, "Branch, tag or commit to start from."] = "HEAD",
        path: Annotated[str | None, "Only commits touching this file or directory (workspace-relative)."] = None,
        limit: Annotated[int, f"How many commits to list, 1 to {MAX_LOG_LIMIT}."] = 20,
        author: Annotated[str | None, "Only commits whose author name or email matches this pattern."] = None,
        since: Annotated[str | None, "Only commits after this date, e.g. '2024-01-31' or '2 weeks ago'."] = None,
        grep: Annotated[str | None, "Only commits whose message matches this pattern."] = None,
    ) -> str:
        """List commits, newest first, one line each: short id, date, [author], subject."""
        with repository.call("git_log") as git:
            if not 1 <= limit <= MAX_LOG_LIMIT:
                raise ToolInputError(f"limit must be between 1 and {MAX_LOG_LIMIT}")
            commit = git.commit(ref)
            filters = [
                f"--{name}={_filter_value(name, value)}"
                for name, value in (("author", author), ("since", since), ("grep", grep))
                if value is not None
            ]
            output = git.run(
                "log", f"--max-count={limit}", "--date=short", "--format=%h %ad [%an] %s", *filters, commit,
                "--", *git.pathspec(path),
            )
            lines = output.splitlines()
            if len(lines) < limit and git.is_shallow():
                output = f"{output}\n{_SHALLOW_NOTE}" if lines else _SHALLOW_NOTE
            return output or "no commits match"

    @tool
    def git_show(
        ref: Annotated[str, "Commit to show (branch, tag or id), or REF:PATH for a file at that commit."],
        path: Annotated[str | None, "Show this file (workspace-relative) as it was at ref instead."] = None,
    ) -> str:
        """Show a commit (message, changed-file summary and patch), or a file as it was at a commit."""
        with repository.call("git_show") as git:
            revision, spec_path = _split_spec(ref)
            if spec_path is not None and path is not None:
                raise ToolInputError("give the file either as REF:PATH or as path, not both")
            path = spec_path if spec_path is not None else path
            commit = git.commit(revision)
            if path is None:
                return git.run("show", "--no-ext-diff", "--no-textconv", "--stat", "--patch", "--format=fuller",
                               "--date=iso", commit, hint="use git_diff with a path to see one file")
            tree_path = git.tree_path(path)
            output = git.run("show", "--no-ext-diff", "--no-textconv", f"{commit}:{tree_path}",
                             hint="read the file in the workspace with an offset instead")
            if "\x00" in output[:BINARY_SNIFF_BYTES]:
                return f"{tree_path or '.'} at {revision} is a binary file; not shown"
            return output

    @tool
    def git_blame(
        path: Annotated[str, "File to blame (workspace-relative)."],
        ref: Annotated[str, "Commit whose version of the file to blame."] = "HEAD",
        start_line: Annotated[int | None, "First line to blame, 1-based."] = None,
        end_line: Annotated[int | None, "Last line to blame, inclusive."] = None,
    ) -> str:
        """Show who last changed each line of a file: commit, author, date, line number and text."""
        with repository.call("git_blame") as git:
            line_range = _line_range(start_line, end_line)
            commit = git.commit(ref)
            tree_path = git.tree_path(path)
            if not tree_path:
                raise ToolInputError("path must name a file, not the workspace root")
            return git.run("blame", "--no-textconv", "--date=short", *line_range, commit, "--", tree_path,
                           hint="blame fewer lines with start_line and end_line")

    @tool
    def git_diff(
        from_ref: Annotated[str, "Older commit (branch, tag or id); a single commit, not a range."],
        to_ref: Annotated[str | None, "Newer commit; if omitted, the files as currently checked out."] = None,
        path: Annotated[str | None, "Only this file or directory (workspace-relative)."] = None,
    ) -> str:
        """Show what changed between two commits: a changed-file summary, then the patch."""
        with repository.call("git_diff") as git:
            commits = [git.commit(from_ref)] + ([git.commit(to_ref)] if to_ref is not None else [])
            output = git.run("diff", "--no-ext-diff", "--no-textconv", "--stat", "--patch", *commits,
                             "--", *git.pathspec(path), hint="narrow the diff with path")
            return output or "no differences"

    @tool
    def git_refs(
        kind: Annotated[Literal["branches", "tags", "all"], "Which refs to list."] = "all",
    ) -> str:
        """List branches and/or tags with the commit each points to, its date and subject."""
        with repository.call("git_refs") as git:
            patterns = {
                "branches": ("refs/heads", "refs/remotes"),
                "tags": ("refs/tags",),
                "all": ("refs/heads", "refs/remotes", "refs/tags"),
            }[kind]
            listing = git.run(
                "for-each-ref", f"--count={MAX_REFS_LISTED + 1}",
                "--format=%(refname:short)  %(if)%(*objectname)%(then)%(*objectname:short)"
                "%(else)%(objectname:short)%(end)  %(creatordate:short)  %(contents:subject)",
                *patterns,
            ).splitlines()
            if len(listing) > MAX_REFS_LISTED:
                listing = [*listing[:MAX_REFS_LISTED], f"[more than {MAX_REFS_LISTED} refs; only the first are listed]"]
            branch = git.run("rev-parse", "--abbrev-ref", "HEAD").strip()
            head = f"HEAD: {git.run('rev-parse', '--short', 'HEAD').strip()}" + (
                " (detached)" if branch == "HEAD" else f" (branch {branch})"
            )
            return "\n".join([head, *(listing or [f"no {kind if kind != 'all' else 'branches or tags'}"])])

    @tool
    def git_checkout(
        ref: Annotated[str, "Branch, tag or commit to check out (detached)."],
    ) -> str:
        """Check out a commit so that the file tools (read, grep, ls) see the tree as it was then."""
        with repository.call("git_checkout") as git:
            commit = git.commit(ref)
            git.run("checkout", "--quiet", "--detach", commit)
            summary = git.run("log", "-1", "--format=%h %s", commit).strip()
            return f"HEAD is now at {summary}; the file tools now show this version"

    return [git_log, git_show, git_blame, git_diff, git_refs, git_checkout]


class _Repository:
    """One workspace's repository as the git tools see it.

    Calls take turns: a checkout changes the work tree, and with it any
    configuration the repository includes from there (`include.path`,
    `includeIf "onbranch:..."`), so no call may run git on half of one, nor
    with overrides made for the configuration before it. The configuration is
    read at the first call and again after every checkout: nothing else the
    tools run writes it (hooks and every program-running key are disabled).
    """

    def __init__(self, workspace: Workspace) -> None:
        self._workspace = workspace
        self._lock = threading.Lock()
        self._config: tuple[dict[str, str], set[str]] | None = None

    @contextlib.contextmanager
    def call(self, tool_name: str) -> Iterator["_Git"]:
        with self._lock:
            try:
                if self._config is None:
                    _check_repository(self._workspace)
                    self._config = _neutralising_environment(self._workspace)
                environment, present = self._config
                refused = [key for key, name in _REFUSED_KEYS.items() if name == tool_name and key in present]
                if refused:
                    raise ToolInputError(
                        f"{tool_name} is unavailable: the repository's configuration sets {refused[0]}")
                yield _Git(self._workspace, environment)
            finally:
                if tool_name == "git_checkout":
                    self._config = None


class _Git:
    """Runs contained git commands in one workspace for one tool call, with
    the repository's dangerous configuration overridden by `environment`."""

    def __init__(self, workspace: Workspace, environment: dict[str, str]) -> None:
        self._workspace = workspace
        self._environment = environment

    def run(self, *args: str, hint: str = "", check: bool = True) -> str:
        """git's output as text, capped; ToolInputError when git fails (or ""
        when not `check`)."""
        result = self._workspace.run(
            Command(
                argv=(*_GIT_PREFIX, *_config_args(), *args),
                timeout_s=GIT_TIMEOUT_S,
                env=self._environment,
                max_output_bytes=MAX_GIT_OUTPUT_BYTES,
            )
        )
        if result.timed_out:
            raise ToolInputError(f"git {args[0]} timed out after {GIT_TIMEOUT_S:g} s; {hint or 'ask for less'}")
        if result.exit_code != 0:
            if not check:
                return ""
            raise ToolInputError(f"git {args[0]} failed: {_error_line(result.stderr)}")
        output = result.stdout.decode("utf-8", "replace")
        if result.truncated:
            output += f"\n[output cut at {MAX_GIT_OUTPUT_BYTES} bytes; {hint or 'ask for less'}]"
        return output.rstrip("\n")

    def commit(self, ref: str) -> str:
        """The full id of the commit `ref` names; ToolInputError if it names none."""
        if not ref or ref.startswith("-") or len(ref) > MAX_REF_CHARS or _CONTROL.search(ref):
            raise ToolInputError(f"{ref!r} is not a ref name (try git_refs)")
        if ".." in ref:
            raise ToolInputError(f"{ref!r} is a range; pass one commit (git_diff takes from_ref and to_ref)")
        # A full clone has other branches only as origin/<name>: accept the bare name too.
        for candidate in (ref, f"refs/remotes/origin/{ref}"):
            output = self.run("rev-parse", "--verify", "--quiet", "--end-of-options", f"{candidate}^{{commit}}",
                              check=False)
            if re.fullmatch(r"[0-9a-f]{40}|[0-9a-f]{64}", output):
                return output
        self.run("rev-parse", "--git-dir")  # "not a git repository" beats "unknown ref"
        raise ToolInputError(f"unknown ref {ref!r} (try git_refs)")

    def tree_path(self, path: str) -> str:
        """`path` as git names it in a tree ('' for the root), once proven inside."""
        if not isinstance(path, str) or _CONTROL.search(path):
            raise ToolInputError("path contains control characters")
        # The workspace refuses absolute paths, '..' escapes and symlinks out.
        self._workspace.resolve(path)
        normal = posixpath.normpath(path or ".")
        if normal == ".." or normal.startswith("../") or normal.startswith("/"):
            raise ToolInputError(f"{path!r} is outside the workspace")
        if normal == ".git" or normal.startswith(".git/"):
            raise ToolInputError(f"{path!r} is inside .git, which the git tools do not show")
        return "" if normal == "." else normal

    def pathspec(self, path: str | None) -> list[str]:
        """Arguments after `--` limiting a command to `path` (none for the root)."""
        if path is None:
            return []
        tree_path = self.tree_path(path)
        return [tree_path] if tree_path else []

    def is_shallow(self) -> bool:
        return self.run("rev-parse", "--is-shallow-repository").strip() == "true"

def _check_repository(workspace: Workspace) -> None:
    # A `.git` that is a symlink (or gitfile) out of the workspace would let
    # git read another repository on the host.
    if workspace.resolve(".git") != ".git":
        raise ToolInputError("the workspace's .git is not inside the workspace")


def _neutralising_environment(workspace: Workspace) -> tuple[dict[str, str], set[str]]:
    """GIT_CONFIG_* variables overriding every dangerous key the repository's
    configuration sets, and the set of keys it sets.

    Environment pairs, unlike `-c key=value`, keep a driver name containing
    '=' or spaces intact, so no key escapes the override.
    """
    listing = workspace.run(
        Command(
            argv=(*_GIT_PREFIX, *_config_args(), "config", "--list", "--name-only", "--includes", "-z"),
            timeout_s=GIT_TIMEOUT_S,
            max_output_bytes=MAX_GIT_OUTPUT_BYTES,
        )
    )
    if listing.exit_code != 0 or listing.truncated:
        raise ToolInputError(f"cannot read the repository's configuration: {_error_line(listing.stderr)}")
    keys = {key for key in listing.stdout.decode("utf-8", "surrogateescape").split("\x00") if key}
    overrides = [
        (key, value)
        for key in sorted(keys)
        for pattern, value in _NEUTRALISED_KEYS
        if pattern.fullmatch(key)
    ]
    environment = {"GIT_CONFIG_COUNT": str(len(overrides)), "GIT_ATTR_NOSYSTEM": "1"}
    for index, (key, value) in enumerate(overrides):
        environment[f"GIT_CONFIG_KEY_{index}"] = key
        environment[f"GIT_CONFIG_VALUE_{index}"] = value
    return environment, keys


def _config_args() -> list[str]:
    return [item for pair in _FIXED_CONFIG for item in ("-c", pair)]


def _split_spec(spec: str) -> tuple[str, str | None]:
    """Split `REF:PATH` into its parts; a ':' inside `@{...}` belongs to the ref."""
    depth = 0
    for index, char in enumerate(spec):
        if char == "{":
            depth += 1
        elif char == "}":
            depth = max(depth - 1, 0)
        elif char == ":" and depth == 0 and index > 0:
            return spec[:index], spec[index + 1 :]
    return spec, None


def _filter_value(name: str, value: str) -> str:
    if not value or len(value) > MAX_FILTER_CHARS or _CONTROL.search(value):
        raise ToolInputError(f"{name} must be a short single-line text")
    if name == "since" and value.startswith("-"):
        raise ToolInputError("since must be a date such as '2024-01-31' or '3 months ago'")
    return value


def _line_range(start_line: int | None, end_line: int | None) -> list[str]:
    if start_line is None and end_line is None:
        return []
    start = 1 if start_line is None else start_line
    if start < 1 or (end_line is not None and end_line < start):
        raise ToolInputError("start_line must be at least 1 and end_line at least start_line")
    return [f"-L{start},{'' if end_line is None else end_line}"]


def _error_line(stderr: bytes) -> str:
    """The line of git's stderr that says what went wrong."""
    text = stderr.decode("utf-8", "replace")
    if re.search(r"transport '[^']*' not allowed", text):
        # A partial clone tried to download a blob it left out; we allow no network.
        return "it needs file contents that the clone left out (larger than its blob limit)"
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    flagged = [line for line in lines if line.startswith(("fatal:", "error:"))]
    chosen = (flagged or lines or ["git gave no reason"])[0]
    return re.sub(r"^(fatal|error):\s*", "", chosen)
