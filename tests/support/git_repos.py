"""Real git repositories with a known history, and a real `git daemon` serving them.

History of the source repository (oldest first; `main` is checked out):

    c1  Alice  2024-01-01  "Initial commit"          README.md, src/app.py        tag v0.1 (lightweight)
    c2  Bob    2024-02-01  "Add guide and greeting"  docs/guide.md, src/app.py
    c3  Alice  2024-03-01  "Vendor lib and add data" big.bin (> TEST_BLOB_LIMIT),
                                                     vendor/lib (a submodule entry),
                                                     .gitmodules, README.md       tag v1.0 (annotated)
    c4  Bob    2024-02-15  "Add feature flag"        feature.txt, on branch `feature` off c2

The source repository also carries hooks that would create a marker file if
anything ran them, so a test can prove nothing did.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import threading
from pathlib import Path

import attrs
import pytest

ALICE = ("Alice Example", "alice@example.com")
BOB = ("Bob Builder", "bob@example.com")
# Clones in tests use this blob limit so that big.bin is "large" without being slow.
TEST_BLOB_LIMIT = "1k"
BIG_FILE_BYTES = 4_096
DAEMON_START_TIMEOUT_S = 10
_GIT_TIMEOUT_S = 30


@attrs.frozen
class SourceRepo:
    """A repository on disk with the history in the module docstring."""

    path: Path
    commits: tuple[str, ...]  # c1, c2, c3 on main, oldest first
    feature_commit: str  # c4, tip of branch `feature`
    submodule_path: str
    hook_marker: Path  # created by the source's hooks, if they ever ran

    @property
    def head(self) -> str:
        return self.commits[-1]


def git(*args: str, cwd: Path, env: dict[str, str] | None = None) -> str:
    """Run git for a fixture, isolated from the developer's configuration."""
    completed = subprocess.run(
        ["git", *args],
        cwd=cwd,
        env={**fixture_git_environment(), **(env or {})},
        capture_output=True,
        text=True,
        timeout=_GIT_TIMEOUT_S,
        check=False,
    )
    if completed.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} failed: {completed.stderr.strip()}")
    return completed.stdout.strip()


def fixture_git_environment() -> dict[str, str]:
    env = {name: value for name, value in os.environ.items() if not name.startswith("GIT_")}
    env.update(GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL="/dev/null", GIT_TERMINAL_PROMPT="0")
    return env


def _commit(repo: Path, message: str, who: tuple[str, str], date: str) -> str:
    name, email = who
    stamp = f"{date}T12:00:00+0000"
    git(
        "commit", "--quiet", "--no-verify", "-m", message,
        cwd=repo,
        env={
            "GIT_AUTHOR_NAME": name, "GIT_AUTHOR_EMAIL": email, "GIT_AUTHOR_DATE": stamp,
            "GIT_COMMITTER_NAME": name, "GIT_COMMITTER_EMAIL": email, "GIT_COMMITTER_DATE": stamp,
        },
    )
    return git("rev-parse", "HEAD", cwd=repo)


def _write(repo: Path, relative: str, text: str | bytes) -> None:
    path = repo / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    git("add", "--", relative, cwd=repo)


def _install_marker_hooks(git_dir: Path, marker: Path) -> None:
    """Hooks that would leave `marker` behind if git ever ran them."""
    hooks = git_dir / "hooks"
    hooks.mkdir(parents=True, exist_ok=True)
    for name in ("post-checkout", "post-merge", "pre-commit", "reference-transaction", "post-index-change"):
        hook = hooks / name
        hook.write_text(f"#!/bin/sh\necho {name} >> '{marker}'\n")
        hook.chmod(0o755)


def build_source_repo(root: Path) -> SourceRepo:
    """Create the submodule's repository and the source repository under `root`."""
    library = root / "library"
    library.mkdir(parents=True)
    git("init", "--quiet", "--initial-branch=main", cwd=library)
    _write(library, "lib.txt", "library code\n")
    library_commit = _commit(library, "Library", ALICE, "2023-12-01")

    repo = root / "source"
    repo.mkdir()
    git("init", "--quiet", "--initial-branch=main", cwd=repo)
    _write(repo, "README.md", "# Demo\n\nA demo project.\n")
    _write(repo, "src/app.py", "def main():\n    return 1\n")
    c1 = _commit(repo, "Initial commit", ALICE, "2024-01-01")
    git("tag", "v0.1", cwd=repo)

    _write(repo, "docs/guide.md", "# Guide\n\nRun `app`.\n")
    _write(repo, "src/app.py", "def main():\n    return greet()\n\n\ndef greet():\n    return 'hello'\n")
    c2 = _commit(repo, "Add guide and greeting", BOB, "2024-02-01")

    git("checkout", "--quiet", "-b", "feature", cwd=repo)
    _write(repo, "feature.txt", "flag = on\n")
    c4 = _commit(repo, "Add feature flag", BOB, "2024-02-15")
    git("checkout", "--quiet", "main", cwd=repo)

    _write(repo, "big.bin", bytes(range(256)) * (BIG_FILE_BYTES // 256))
    _write(repo, ".gitmodules", f'[submodule "vendor/lib"]\n\tpath = vendor/lib\n\turl = {library.as_uri()}\n')
    git("update-index", "--add", "--cacheinfo", f"160000,{library_commit},vendor/lib", cwd=repo)
    _write(repo, "README.md", "# Demo\n\nA demo project.\n\nSee docs/guide.md.\n")
    c3 = _commit(repo, "Vendor lib and add data", ALICE, "2024-03-01")
    git("tag", "-a", "v1.0", "-m", "Release 1.0", cwd=repo,
        env={"GIT_COMMITTER_NAME": ALICE[0], "GIT_COMMITTER_EMAIL": ALICE[1],
             "GIT_COMMITTER_DATE": "2024-03-02T12:00:00+0000"})

    # Let any client filter blobs, as hosting services do.
    git("config", "uploadpack.allowFilter", "true", cwd=repo)
    marker = root / "source-hook-ran"
    _install_marker_hooks(repo / ".git", marker)
    return SourceRepo(path=repo, commits=(c1, c2, c3), feature_commit=c4,
                      submodule_path="vendor/lib", hook_marker=marker)


@pytest.fixture(scope="session")
def source_repo(tmp_path_factory) -> SourceRepo:
    """The source repository, built once per session; tests must not modify it."""
    return build_source_repo(tmp_path_factory.mktemp("git-source"))


# -- git daemon --------------------------------------------------------------


@attrs.frozen
class GitDaemon:
    port: int
    base: Path

    def url(self, name: str) -> str:
        return f"git://127.0.0.1:{self.port}/{name}"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _wait_until_ready(process: subprocess.Popen) -> None:
    """Block until the daemon logs that it listens (git daemon --verbose says
    "Ready to rumble"), or fail if it exits or stays silent too long."""
    ready = threading.Event()
    lines: list[str] = []

    def drain() -> None:
        # Keep reading for the daemon's whole life so its log never fills the pipe.
        for line in process.stderr:
            lines.append(line)
            if "Ready to rumble" in line:
                ready.set()
        ready.set()

    threading.Thread(target=drain, daemon=True).start()
    if not ready.wait(DAEMON_START_TIMEOUT_S) or process.poll() is not None:
        raise RuntimeError(f"git daemon did not start: {''.join(lines)[-2000:]}")


@pytest.fixture(scope="session")
def git_daemon(source_repo: SourceRepo) -> GitDaemon:
    """`git daemon` on 127.0.0.1 serving the source repository as `source`."""
    base = source_repo.path.parent
    port = free_port()
    process = subprocess.Popen(
        ["git", "daemon", "--verbose", "--reuseaddr", "--export-all", "--informative-errors",
         f"--base-path={base}", "--listen=127.0.0.1", f"--port={port}", str(base)],
        env=fixture_git_environment(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        # `git daemon` runs git-daemon as a child, which forks per connection:
        # its own process group lets us stop all of them, not just the wrapper.
        start_new_session=True,
    )
    try:
        _wait_until_ready(process)
        yield GitDaemon(port=port, base=base)
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


@pytest.fixture
def closed_port() -> int:
    """A port on 127.0.0.1 where nothing listens: connections are refused at once."""
    return free_port()


@pytest.fixture
def silent_server():
    """A TCP port on 127.0.0.1 that accepts connections and never answers."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        yield server.getsockname()[1]


# -- smart HTTP ----------------------------------------------------------------

# Request headers `git http-backend` reads from its CGI environment.
_CGI_HEADERS = ("CONTENT_TYPE", "CONTENT_LENGTH", "HTTP_CONTENT_ENCODING", "HTTP_GIT_PROTOCOL")


def _http_backend_app(base: Path):
    """A WSGI app running `git http-backend` (git's own CGI) for each request."""

    def app(environ, start_response):
        env = {
            **fixture_git_environment(),
            "GIT_PROJECT_ROOT": str(base),
            "GIT_HTTP_EXPORT_ALL": "1",
            "REQUEST_METHOD": environ["REQUEST_METHOD"],
            "PATH_INFO": environ.get("PATH_INFO", ""),
            "QUERY_STRING": environ.get("QUERY_STRING", ""),
            "REMOTE_ADDR": "127.0.0.1",
        }
        env.update({name: environ[name] for name in _CGI_HEADERS if environ.get(name)})
        if "HTTP_GIT_PROTOCOL" in env:
            env["GIT_PROTOCOL"] = env["HTTP_GIT_PROTOCOL"]
        length = int(environ.get("CONTENT_LENGTH") or 0)
        body = environ["wsgi.input"].read(length) if length else b""
        completed = subprocess.run(["git", "http-backend"], input=body, env=env, capture_output=True,
                                   timeout=_GIT_TIMEOUT_S, check=False)
        head, _, payload = completed.stdout.partition(b"\r\n\r\n")
        status, headers = "200 OK", []
        for line in head.decode("latin-1").split("\r\n"):
            name, _, value = line.partition(":")
            if name.lower() == "status":
                status = value.strip()
            elif name:
                headers.append((name, value.strip()))
        start_response(status, headers)
        return [payload]

    return app


@attrs.frozen
class GitHttpServer:
    port: int

    def url(self, name: str, userinfo: str = "") -> str:
        return f"http://{userinfo + '@' if userinfo else ''}127.0.0.1:{self.port}/{name}"


@pytest.fixture(scope="session")
def git_http_server(source_repo: SourceRepo):
    """A smart-HTTP git server on 127.0.0.1 serving the source repository as `source`."""
    from wsgiref.simple_server import WSGIRequestHandler, make_server

    class QuietHandler(WSGIRequestHandler):
        def log_message(self, *args) -> None:  # keep pytest's output clean
            pass

    server = make_server("127.0.0.1", 0, _http_backend_app(source_repo.path.parent), handler_class=QuietHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield GitHttpServer(port=server.server_port)
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
