"""Cloning the repository repo mode explores, on the host, into the workspace.

The clone is lean by default (one commit, no large blobs, one branch) and never
lets the repository run anything on our host: no hooks, no fsmonitor, no
submodules, no remote-helper transports such as ext::. The user's own git
configuration (credential helpers, url.*.insteadOf) still applies: the URL is
theirs. Git failures become one
CloneError sentence that never echoes credentials embedded in the URL.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path
from urllib.parse import unquote, urlsplit, urlunsplit

import attrs

from dispatcher.errors import CloneError, UsageError

# URL schemes we accept. Everything else (ext::, fd::, remote helpers such as
# hg:: or custom schemes) could run a program of the URL's choosing.
_SCHEMES = frozenset({"https", "http", "ssh", "git+ssh", "ssh+git", "git", "file"})
# `<transport>::<address>` selects a remote helper (ext::, fd::, ...).
_REMOTE_HELPER = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*::")
_URL_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
# git's scp-like syntax: `[user@]host:path`, a colon before any slash.
_SCP_LIKE = re.compile(r"^(?:[^@/\s]+@)?[^/:\s]+:")
_BLOB_LIMIT = re.compile(r"^\d+[kKmMgG]?$")
_HEX_REF = re.compile(r"^[0-9a-fA-F]{4,40}$")
# userinfo in a URL, wherever it appears in a message: `scheme://user:secret@`.
_USERINFO = re.compile(r"(?<=://)[^/@\s]+@")

# Configuration for every git we run here. Command-line `-c` outranks the
# user's and the repository's files, so a hostile repository (or template
# directory) cannot run hooks or an fsmonitor on our host.
_SAFE_CONFIG = (
    "core.hooksPath=/dev/null",
    "core.fsmonitor=false",
    "submodule.recurse=false",
    "fetch.recurseSubmodules=false",
    "protocol.ext.allow=never",
)
_GIT_ENVIRONMENT = {
    "GIT_TERMINAL_PROMPT": "0",
    "GIT_CONFIG_NOSYSTEM": "1",
    # Checkout must not download Git LFS objects through the user's LFS filter.
    "GIT_LFS_SKIP_SMUDGE": "1",
}
# What `git fetch` says when the server has no such ref or will not serve a
# bare commit id; only then is a full fetch worth trying for a commit id.
_UNSERVED_REF = ("couldn't find remote ref", "not our ref", "unadvertised object", "no such remote ref")


@attrs.frozen
class CloneInfo:
    url: str  # the URL cloned, credentials removed
    head: str  # the commit checked out
    ref: str | None  # the branch, tag or commit asked for, or the default branch
    shallow: bool


def clone_repository(
    target: str,
    dest: Path,
    *,
    ref: str | None = None,
    full: bool = False,
    depth: int = 1,
    blob_limit: str = "5m",
    timeout_s: float = 120,
) -> CloneInfo:
    """Clone `target` into the existing empty directory `dest` and check out `ref`.

    Shallow (`depth` commits, blobs above `blob_limit` left out) unless `full`;
    a `ref` is fetched on its own, shallowly, without needing `full`.
    """
    url = _normalise_target(target)
    if depth < 1:
        raise UsageError(f"--depth must be at least 1, not {depth}")
    if blob_limit and not _BLOB_LIMIT.match(blob_limit):
        raise UsageError(f"blob_limit {blob_limit!r} is not a size such as 5m, 512k or 0")
    if ref is not None and (not ref or ref.startswith("-") or any(ord(c) < 32 or c == "\x7f" for c in ref)):
        raise UsageError(f"--ref {ref!r} is not a branch, tag or commit name")
    runner = _Git(dest, url, deadline=time.monotonic() + timeout_s, timeout_s=timeout_s)
    filter_args = [f"--filter=blob:limit={blob_limit}"] if blob_limit else []

    if ref is None:
        shallow_args = [] if full else [f"--depth={depth}", "--single-branch"]
        runner.run("clone", "--quiet", "--no-recurse-submodules", "--template=", *shallow_args, *filter_args,
                   "--", url, ".")
        checked_out = runner.output("symbolic-ref", "--quiet", "--short", "HEAD", check=False) or None
    else:
        runner.run("init", "--quiet", "--template=", ".")
        runner.run("remote", "add", "origin", "--", url)
        _fetch_ref(runner, ref, full=full, depth=depth, filter_args=filter_args)
        checked_out = ref
    # The workspace's .git/config is readable by the agent: keep no secret in it.
    runner.run("remote", "set-url", "origin", "--", redact(url))
    shallow = runner.output("rev-parse", "--is-shallow-repository") == "true"
    return CloneInfo(url=redact(url), head=runner.output("rev-parse", "HEAD"), ref=checked_out, shallow=shallow)


def _fetch_ref(runner: "_Git", ref: str, *, full: bool, depth: int, filter_args: list[str]) -> None:
    """Fetch and check out `ref` in the freshly initialised repository."""
    if not full:
        try:
            runner.run("fetch", "--quiet", "--no-tags", f"--depth={depth}", *filter_args, "origin", ref)
        except CloneError as exc:
            # Servers may refuse a bare commit id (uploadpack.allowAnySHA1InWant
            # off) and never serve an abbreviated one: only then fetch everything.
            if not (isinstance(exc, _RefNotServed) and _HEX_REF.match(ref)):
                raise
        else:
            runner.run("checkout", "--quiet", "--detach", "FETCH_HEAD")
            return
    runner.run("fetch", "--quiet", *filter_args, "origin",
               "+refs/heads/*:refs/remotes/origin/*", "+refs/tags/*:refs/tags/*")
    for candidate in (f"refs/remotes/origin/{ref}", f"refs/tags/{ref}", ref):
        commit = runner.output("rev-parse", "--verify", "--quiet", "--end-of-options", f"{candidate}^{{commit}}",
                               check=False)
        if commit:
            runner.run("checkout", "--quiet", "--detach", commit)
            return
    # Not a branch, tag or known commit: maybe a ref outside heads and tags.
    runner.run("fetch", "--quiet", *filter_args, "origin", ref)
    runner.run("checkout", "--quiet", "--detach", "FETCH_HEAD")


def redact(url: str) -> str:
    """`url` without the user name and password it may carry."""
    parts = urlsplit(url)
    if parts.scheme and "@" in parts.netloc:
        return urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]))
    return url


def _normalise_target(target: str) -> str:
    """The URL to clone; UsageError if the target is refused or missing."""
    if not target or target.startswith("-"):
        raise UsageError(f"URL argument {target!r} is not a repository URL or path")
    if any(ord(c) < 32 or c == "\x7f" for c in target):
        raise UsageError("URL argument contains control characters")
    scheme_match = _URL_SCHEME.match(target)
    if scheme_match:
        scheme = scheme_match.group(1).lower()
        if scheme not in _SCHEMES:
            raise UsageError(f"URL argument uses the unsupported scheme {scheme!r}; use https, ssh, git or file")
        if scheme == "file":
            _require_local_repository(Path(unquote(urlsplit(target).path)), target)
        return target
    if _REMOTE_HELPER.match(target):
        raise UsageError(f"URL argument {redact(target)!r} names a git remote helper, which is refused")
    local = Path(target).expanduser()
    if local.exists() or not _SCP_LIKE.match(target):
        _require_local_repository(local, target)
        # A file:// URL, not a path: git ignores --depth and --filter for local paths.
        return local.resolve().as_uri()
    return target


def _require_local_repository(path: Path, shown: str) -> None:
    # Judged from the layout alone: running git inside an untrusted directory
    # would read its configuration.
    is_worktree = (path / ".git").exists()
    is_bare = (path / "HEAD").is_file() and (path / "objects").is_dir()
    if not path.is_dir() or not (is_worktree or is_bare):
        what = "does not exist" if not path.exists() else "is not a git repository"
        raise UsageError(f"URL argument {shown!r} {what}")


class _RefNotServed(CloneError):
    """The server has no such ref, or will not serve this commit id on its own."""


class _Git:
    """Runs git in `dest` through GitPython, within one overall deadline."""

    def __init__(self, dest: Path, url: str, *, deadline: float, timeout_s: float):
        try:
            import git  # GitPython: imported here, so `research --help` stays instant
        except ImportError as exc:  # GitPython refuses to import without a git executable
            raise CloneError("git is not installed or not on PATH") from exc

        self._git = git.Git(str(dest))
        self._not_found = git.GitCommandNotFound
        self._url = url
        self._deadline = deadline
        self._timeout_s = timeout_s
        # Without a terminal, git runs in a session of its own, so a timeout or
        # an interrupt ends it and everything it started (ssh, remote helpers,
        # index-pack) before the workspace is removed under them. At a terminal
        # it stays in ours: ssh must be able to ask for a passphrase there, and
        # Ctrl-C reaches the whole foreground group anyway.
        self._own_session = not _has_terminal()
        # git allows file:// only for a user-initiated clone; say that this one is.
        local = url.lower().startswith("file:")
        self._config = [*_SAFE_CONFIG, *(["protocol.file.allow=always"] if local else [])]

    def run(self, *args: str, check: bool = True) -> str:
        """git's stdout; CloneError (or "" when not `check`) if it fails or runs out of time."""
        remaining = self._deadline - time.monotonic()
        if remaining <= 0:
            raise CloneError(self._timed_out())
        argv = ["git", *(item for pair in self._config for item in ("-c", pair)), *args]
        try:
            handle = self._git.execute(argv, env=_GIT_ENVIRONMENT, as_process=True,
                                       start_new_session=self._own_session)
        except self._not_found as exc:
            raise CloneError("git is not installed or not on PATH") from exc
        process = handle.proc
        try:
            stdout, stderr = process.communicate(timeout=remaining)
        except subprocess.TimeoutExpired:
            _kill(process, own_session=self._own_session)
            process.communicate()
            if not check:
                return ""
            raise CloneError(self._timed_out()) from None
        except BaseException:
            _kill(process, own_session=self._own_session)
            process.wait()
            raise
        if process.returncode != 0:
            if not check:
                return ""
            raise self._translate(_text(stderr), args)
        return _text(stdout)

    def output(self, *args: str, check: bool = True) -> str:
        return self.run(*args, check=check).strip()

    def _timed_out(self) -> str:
        return f"cloning {redact(self._url)} timed out after {self._timeout_s:g} s"

    def _translate(self, stderr: str, args: tuple[str, ...]) -> CloneError:
        """One sentence for a failed git command, without credentials."""
        stderr = stderr.strip()
        shown = redact(self._url)
        if args[0] == "fetch" and any(marker in stderr for marker in _UNSERVED_REF):
            return _RefNotServed(f"ref {args[-1]!r} was not found in {shown}")
        if args[0] == "checkout":
            return CloneError(f"cannot check out the requested ref from {shown}: {_fatal_line(stderr)}")
        return CloneError(f"cannot clone {shown}: {_fatal_line(stderr)}")


def _fatal_line(stderr: str) -> str:
    """The line of git's stderr that says what went wrong, without credentials."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    if not lines:
        return "git failed without a message"
    flagged = [i for i, line in enumerate(lines) if line.startswith("fatal:")]
    flagged = flagged or [i for i, line in enumerate(lines) if line.startswith("error:")]
    index = flagged[0] if flagged else len(lines) - 1
    # ssh and helpers print the real cause first, then this generic fatal line.
    if lines[index].startswith("fatal: Could not read from remote repository") and index > 0:
        index = 0
    chosen = lines[index]
    # "fatal: unable to connect to host:" is followed by the reason on the next line.
    if chosen.endswith(":") and index + 1 < len(lines):
        chosen = f"{chosen} {lines[index + 1]}"
    chosen = re.sub(r"^(fatal|error):\s*", "", chosen)
    return _USERINFO.sub("", chosen).rstrip(".")


def _has_terminal() -> bool:
    try:
        os.close(os.open("/dev/tty", os.O_RDONLY | os.O_NOCTTY))
    except OSError:
        return False
    return True


def _kill(process: subprocess.Popen, *, own_session: bool) -> None:
    """Kill git, and with it its session when it has one of its own."""
    if not own_session:
        process.kill()
        return
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _text(value) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value or "")
