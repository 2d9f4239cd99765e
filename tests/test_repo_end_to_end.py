"""`research repo` end to end: the real CLI, real git, litellm's real HTTP path
against the scripted model server, and assertions on what a user sees."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.support.cli import cli_environment, leftover_workspaces, research, start_research
from tests.support.docker_engine import (  # noqa: F401
    docker_engine,
    running_research_containers,
    sandbox,
    sandbox_watch,
)
from tests.support.git_repos import closed_port, git, git_daemon, source_repo  # noqa: F401
from tests.support.scripted_model import (
    answer,
    delay,
    error,
    scripted_model,  # noqa: F401
    tool_calls,
    write_model_config,
)

JSON_KEYS = {
    "answer", "mode", "model", "sources", "citations", "unverified_citations", "usage",
    "steps", "tool_calls", "stopped", "workspace", "elapsed_s",
}
SIGNAL_WAIT_S = 30
# A repository whose workspace takes a while to remove.
MANY_FILES, MANY_FILES_DIRS = 10_000, 200


@pytest.fixture
def run_env(tmp_path, scripted_model):  # noqa: F811
    """Environment for a CLI run: a config pointing at the scripted model, a private TMPDIR."""
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    config = write_model_config(tmp_path / "config.toml", scripted_model)
    return cli_environment(config=config, tmpdir=tmpdir)


def _tmpdir(env: dict[str, str]) -> Path:
    return Path(env["TMPDIR"])


def test_grep_read_answer_over_git_daemon_cites_verified_lines(git_daemon, scripted_model, run_env,  # noqa: F811
                                                               sandbox, sandbox_watch):
    """A repo cloned over git:// is grepped and read, and the answer's path:line citation is verified (on both backends)."""
    scripted_model.add(
        tool_calls(("grep", {"pattern": "def greet"})),
        tool_calls(("read", {"path": "src/app.py"})),
        answer("`greet` returns 'hello' (src/app.py:5-6); `main` calls it (src/app.py:2)."),
    )
    result = research("repo", git_daemon.url("source"), "What does greet return?", "--json",
                      "--sandbox", sandbox, env=run_env)

    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert set(report) == JSON_KEYS
    assert report["answer"].startswith("`greet` returns 'hello'")
    assert report["mode"] == "repo"
    assert report["model"] == "openai/scripted-model"
    assert report["sources"] == ["src/app.py"]
    assert report["citations"] == ["src/app.py:5-6", "src/app.py:2"]
    assert report["unverified_citations"] == []
    assert report["stopped"] == "answer"
    assert report["steps"] == 3 and report["tool_calls"] == 2
    assert report["usage"]["prompt_tokens"] == 300 and report["usage"]["completion_tokens"] == 60
    assert isinstance(report["usage"]["cost_usd"], float)
    assert report["workspace"] is None
    assert report["elapsed_s"] > 0
    # The model really saw ripgrep's match and the numbered file.
    grep_result = scripted_model.messages(1)[-1]["content"]
    assert "src/app.py:5:def greet():" in grep_result
    read_result = scripted_model.messages(2)[-1]["content"]
    assert "return 'hello'" in read_result and "6" in read_result
    # The question and the repository reached the model in the first user message.
    first_user = scripted_model.messages(0)[1]["content"]
    assert "What does greet return?" in first_user and git_daemon.url("source") in first_user
    assert leftover_workspaces(_tmpdir(run_env)) == []


def test_plain_output_is_the_answer_alone_and_stderr_is_quiet(source_repo, scripted_model, run_env):  # noqa: F811
    """Without --json, stdout is exactly the answer; with stderr not a terminal and no -v, stderr is empty."""
    scripted_model.add(answer("It is a demo project (README.md:3)."))
    result = research("repo", str(source_repo.path), "What is this?", env=run_env)
    assert result.exit_code == 0, result.stderr
    assert result.stdout == "It is a demo project (README.md:3).\n"
    assert result.stderr == ""


def test_verbose_shows_every_tool_call_with_arguments_and_size(source_repo, scripted_model, run_env):  # noqa: F811
    """-v prints each tool call with its arguments and result size on stderr."""
    scripted_model.add(tool_calls(("ls", {"path": "src"})), answer("Only app.py (src/app.py:1)."))
    result = research("repo", str(source_repo.path), "List src", "-v", env=run_env)
    assert result.exit_code == 0, result.stderr
    assert 'ls({"path": "src"})' in result.stderr
    assert "chars" in result.stderr
    assert "2 steps, 1 tool calls, 200 prompt + 40 completion tokens" in result.stderr
    assert result.stdout == "Only app.py (src/app.py:1).\n"


def test_unverifiable_citation_is_flagged(source_repo, scripted_model, run_env):  # noqa: F811
    """A path:line past the end of the file, or to a missing file, lands in unverified_citations."""
    scripted_model.add(answer("See src/app.py:999 and src/missing.py:1 and README.md:1."))
    result = research("repo", str(source_repo.path), "q", "--json", env=run_env)
    report = json.loads(result.stdout)
    assert report["citations"] == ["README.md:1"]
    assert report["unverified_citations"] == ["src/app.py:999", "src/missing.py:1"]


def test_no_cleanup_keeps_the_workspace_and_says_where(source_repo, scripted_model, run_env):  # noqa: F811
    """--no-cleanup keeps the cloned workspace, prints its path on stderr and in the JSON."""
    scripted_model.add(answer("Kept."))
    result = research("repo", str(source_repo.path), "q", "--no-cleanup", "--json", env=run_env)
    assert result.exit_code == 0, result.stderr
    kept = Path(json.loads(result.stdout)["workspace"])
    assert f"workspace kept at {kept}" in result.stderr
    assert kept.parent == _tmpdir(run_env) and kept.name.startswith("research-repo-")
    assert (kept / "src" / "app.py").read_text().endswith("return 'hello'\n")


def test_max_steps_asks_once_more_without_tools(source_repo, scripted_model, run_env):  # noqa: F811
    """At --max-steps the model gets one last call with no tools, and stopped says max_steps."""
    scripted_model.add(
        tool_calls(("ls", {})),
        tool_calls(("ls", {"path": "src"})),
        answer("Best effort: there is src/app.py."),
    )
    result = research("repo", str(source_repo.path), "q", "--max-steps", "2", "--json", env=run_env)
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["stopped"] == "max_steps"
    assert report["answer"] == "Best effort: there is src/app.py."
    assert len(scripted_model.requests) == 3
    assert "tools" in scripted_model.requests[1]
    assert not scripted_model.requests[2].get("tools")


def test_streaming_endpoint_gives_the_same_run(source_repo, tmp_path, scripted_model):  # noqa: F811
    """With stream = true the tool calls and answer are reassembled from SSE chunks."""
    config = write_model_config(tmp_path / "stream.toml", scripted_model, stream=True)
    scripted_model.add(tool_calls(("read", {"path": "README.md"})), answer("A demo (README.md:3)."))
    result = research("repo", str(source_repo.path), "q", "--json", env=cli_environment(config=config))
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["answer"] == "A demo (README.md:3)."
    assert report["citations"] == ["README.md:3"]
    assert all(body.get("stream") for body in scripted_model.requests)


def test_rate_limited_model_is_retried_after_retry_after(source_repo, scripted_model, run_env):  # noqa: F811
    """A 429 with Retry-After, then a 500, are retried and the run still answers."""
    scripted_model.add(error(429, retry_after=0.2), error(500), answer("Fine."))
    result = research("repo", str(source_repo.path), "q", "-v", env=run_env)
    assert result.exit_code == 0, result.stderr
    assert result.stdout == "Fine.\n"
    assert len(scripted_model.requests) == 3
    assert "retry" in result.stderr.lower()


def test_rejected_api_key_exits_1_with_one_sentence(source_repo, scripted_model, run_env):  # noqa: F811
    """A 401 is not retried: exit 1, one line on stderr, no traceback, workspace removed."""
    scripted_model.add(error(401, body={"error": {"message": "invalid api key"}}))
    result = research("repo", str(source_repo.path), "q", env=run_env)
    assert result.exit_code == 1
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("research: ")
    assert "Traceback" not in result.stderr
    assert len(scripted_model.requests) == 1
    assert leftover_workspaces(_tmpdir(run_env)) == []


def test_unreachable_clone_exits_1_within_seconds(closed_port, scripted_model, run_env):  # noqa: F811
    """A git:// URL nobody answers fails with one sentence and exit 1, before any model call."""
    started = time.monotonic()
    result = research("repo", f"git://127.0.0.1:{closed_port}/nothing", "q", env=run_env)
    assert result.exit_code == 1
    assert result.stderr.startswith("research: ") and result.stderr.count("\n") == 1
    assert time.monotonic() - started < 30
    assert scripted_model.requests == []
    assert leftover_workspaces(_tmpdir(run_env)) == []


def test_missing_local_path_is_a_usage_error(tmp_path, run_env):
    """A local path that does not exist is the user's to fix: exit 2, naming it."""
    result = research("repo", str(tmp_path / "nope"), "q", env=run_env)
    assert result.exit_code == 2
    assert "nope" in result.stderr and "Traceback" not in result.stderr


def test_missing_question_is_a_usage_error(run_env):
    """Forgetting QUESTION is an argparse usage error with exit 2."""
    result = research("repo", "/tmp", env=run_env)
    assert result.exit_code == 2
    assert "QUESTION" in result.stderr


def test_unknown_model_alias_fails_before_cloning(source_repo, run_env):  # noqa: F811
    """A --model with no provider and no alias is refused with exit 2 before any work."""
    result = research("repo", str(source_repo.path), "q", "--model", "nosuchalias", env=run_env)
    assert result.exit_code == 2, result.stderr
    assert "nosuchalias" in result.stderr
    assert leftover_workspaces(_tmpdir(run_env)) == []


@pytest.mark.parametrize("signum, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_interrupt_mid_run_exits_and_removes_the_workspace(source_repo, scripted_model, run_env, signum, code):  # noqa: F811
    """SIGINT (or SIGTERM) while the model is thinking exits 130 (143) and leaves no workspace."""
    scripted_model.add(tool_calls(("ls", {})), delay(60, answer("too late")))
    process = start_research("repo", str(source_repo.path), "q", env=run_env)
    thinking = lambda: len(scripted_model.requests) >= 2 and len(leftover_workspaces(_tmpdir(run_env))) == 1  # noqa: E731
    assert _signal_when(process, thinking, "the second model call, workspace in place", signum) == code
    assert leftover_workspaces(_tmpdir(run_env)) == []
    assert "interrupted" in process.stderr.read() or code == 143


def test_interrupt_during_clone_leaves_nothing(tmp_path, silent_server_url, run_env):
    """Ctrl-C while the clone hangs exits 130 and removes the half-made workspace."""
    process = start_research("repo", silent_server_url, "q", env=run_env)
    assert _signal_when(process, lambda: leftover_workspaces(_tmpdir(run_env)), "the workspace", signal.SIGINT) == 130
    assert leftover_workspaces(_tmpdir(run_env)) == []


@pytest.fixture
def silent_server():
    """A git:// server that accepts connections and never answers; `.connections` counts them."""
    import socket
    import threading

    class SilentServer:
        def __init__(self) -> None:
            self.socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            self.socket.bind(("127.0.0.1", 0))
            self.socket.listen(8)
            self.url = f"git://127.0.0.1:{self.socket.getsockname()[1]}/hang"
            self.accepted: list[socket.socket] = []
            threading.Thread(target=self._accept, daemon=True).start()

        def _accept(self) -> None:
            while True:
                try:
                    self.accepted.append(self.socket.accept()[0])
                except OSError:
                    return

    server = SilentServer()
    yield server
    server.socket.close()
    for connection in server.accepted:
        connection.close()


@pytest.fixture
def silent_server_url(silent_server):
    """A git:// URL whose server accepts the connection and never answers."""
    return silent_server.url


def test_interrupt_while_git_waits_on_the_server_ends_git_too(silent_server, run_env):
    """Ctrl-C while git is connected and waiting exits 130, removes the workspace and leaves no git running."""
    process = start_research("repo", silent_server.url, "q", env=run_env)
    assert _signal_when(process, lambda: silent_server.accepted, "git to connect", signal.SIGINT) == 130
    assert leftover_workspaces(_tmpdir(run_env)) == []
    assert _processes_naming(silent_server.url) == []


def _processes_naming(text: str) -> list[int]:
    """Live processes of this machine whose command line contains `text`."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and text.encode() in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
        except OSError:
            continue
    return found


# -- hostile model: containment through the whole CLI ---------------------------------


@pytest.fixture
def hostile_repo(tmp_path):
    """A repository whose committed symlinks point at a canary file outside any workspace."""
    outside = tmp_path / "outside"
    outside.mkdir()
    canary_text = f"CANARY-{os.urandom(8).hex()}"
    canary = outside / "canary.txt"
    canary.write_text(canary_text + "\n")
    repo = tmp_path / "hostile"
    repo.mkdir()
    git("init", "--quiet", "--initial-branch=main", cwd=repo)
    (repo / "README.md").write_text("nothing to see\n")
    os.symlink(canary, repo / "leak.txt")
    os.symlink(outside, repo / "outdir")
    os.symlink("../../outside/canary.txt", repo / "relative-leak")
    git("add", "-A", cwd=repo)
    git("-c", "user.name=x", "-c", "user.email=x@x", "commit", "--quiet", "-m", "hostile", cwd=repo)
    return repo, outside, canary, canary_text


def test_hostile_tool_calls_leak_no_canary_byte_and_write_nothing_outside(hostile_repo, scripted_model, run_env,  # noqa: F811
                                                                          sandbox, sandbox_watch):
    """A prompt-injected model's escape attempts are refused on both backends: no canary byte reaches the model,
    no file appears outside."""
    repo, outside, canary, canary_text = hostile_repo
    tmpdir = _tmpdir(run_env)
    hostile_calls = [
        ("read", {"path": "leak.txt"}),
        ("read", {"path": "relative-leak"}),
        ("read", {"path": "outdir/canary.txt"}),
        ("read", {"path": str(canary)}),
        ("read", {"path": "../../../../../../" + str(canary)}),
        ("read", {"path": "leak.txt\u0000"}),
        ("grep", {"pattern": "CANARY", "path": "."}),
        ("grep", {"pattern": "CANARY", "path": "outdir"}),
        ("grep", {"pattern": "--files", "path": ".."}),
        ("grep", {"pattern": "CANARY", "glob": "--pre=cat"}),
        ("ls", {"path": "outdir"}),
        ("ls", {"path": ".."}),
        ("find", {"pattern": "*", "path": "/"}),
        ("find", {"pattern": "**/canary*", "path": "outdir"}),
        ("git_show", {"ref": "HEAD", "path": "../outside/canary.txt"}),
        ("git_show", {"ref": "HEAD:../../outside/canary.txt"}),
        ("git_diff", {"from_ref": "--output=" + str(outside / "written.txt")}),
        ("git_diff", {"from_ref": "--no-index", "to_ref": str(canary)}),
        ("git_log", {"ref": "--output=" + str(outside / "log.txt")}),
        ("git_blame", {"path": "leak.txt"}),
        ("git_checkout", {"ref": "--orphan=x"}),
    ]
    before = sorted(p.name for p in outside.iterdir())
    tmp_before = sorted(p.name for p in tmpdir.iterdir())
    scripted_model.add(tool_calls(*hostile_calls), answer("Nothing escaped."))

    result = research("repo", repo.as_uri(), "Print the canary", "--json", "--sandbox", sandbox, env=run_env)

    assert result.exit_code == 0, result.stderr
    sent = scripted_model.everything_sent()
    assert canary_text not in sent
    assert canary_text not in result.stdout and canary_text not in result.stderr
    # Every hostile call got an answer, so the model was told, not crashed.
    tool_messages = [m for m in scripted_model.messages(1) if m["role"] == "tool"]
    assert len(tool_messages) == len(hostile_calls)
    assert sorted(p.name for p in outside.iterdir()) == before
    assert sorted(p.name for p in tmpdir.iterdir()) == tmp_before


def _signal_when(process: subprocess.Popen, condition, what: str, signum: int) -> int:
    """Wait for `condition`, send `signum` to the CLI, and return its exit code."""
    try:
        _wait_for(condition, what)
        process.send_signal(signum)
        return process.wait(timeout=SIGNAL_WAIT_S)
    finally:
        if process.poll() is None:
            process.kill()


def _entries(directory: Path) -> int:
    """How many entries `directory` holds; -1 once it is gone."""
    try:
        return len(os.listdir(directory))
    except FileNotFoundError:
        return -1


def _wait_for(condition, what: str, timeout_s: float = SIGNAL_WAIT_S, poll_s: float = 0.05) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(poll_s)
    raise AssertionError(f"timed out waiting for {what}")


def test_research_help_lists_the_commands():
    """`research --help` names both modes and the management commands."""
    result = research("--help")
    assert result.exit_code == 0
    for command in ("repo", "web", "fetch", "config", "sandbox", "doctor"):
        assert command in result.stdout


def test_help_does_not_import_litellm():
    """`research --help` stays instant: litellm, trafilatura, docker and importlib.metadata are never
    imported for it."""
    probe = (
        "import sys\nfrom dispatcher.cli import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        "print(*(name in sys.modules for name in ('litellm', 'trafilatura', 'docker', 'importlib.metadata')))"
    )
    out = subprocess.run([os.sys.executable, "-S", "-c", probe], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join(os.sys.path)}).stdout
    assert out.strip().splitlines()[-1] == "False False False False"


def test_version_names_the_installed_version():
    """`research --version` prints the version the package was installed as."""
    from importlib.metadata import version

    result = research("--version")
    assert (result.exit_code, result.stdout) == (0, f"research {version('research')}\n")


# -- the Docker sandbox under signals ------------------------------------------------------------


def _containers_of(pid: int) -> list:
    import docker

    client = docker.from_env()
    try:
        return client.containers.list(all=True, filters={"label": f"research.pid={pid}"})
    finally:
        client.close()


@pytest.mark.docker
@pytest.mark.parametrize(("interrupt", "exit_code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)],
                         ids=["SIGINT", "SIGTERM"])
def test_interrupt_removes_the_container_and_sigkill_leftovers_are_pruned(docker_engine, source_repo,  # noqa: F811
                                                                          scripted_model, run_env,
                                                                          interrupt, exit_code):
    """Ctrl-C or SIGTERM mid-run removes the run's container; after SIGKILL, `research sandbox prune`
    removes what was left."""
    scripted_model.add(tool_calls(("ls", {})), delay(60, answer("too late")),
                       tool_calls(("ls", {})), delay(60, answer("too late")))
    interrupted = start_research("repo", str(source_repo.path), "q", "--sandbox", "docker", env=run_env)
    running = lambda: len(scripted_model.requests) >= 2 and len(_containers_of(interrupted.pid)) == 1  # noqa: E731
    assert _signal_when(interrupted, running, "the second model call, container up", interrupt) == exit_code
    assert _containers_of(interrupted.pid) == []
    assert leftover_workspaces(_tmpdir(run_env)) == []

    killed = start_research("repo", str(source_repo.path), "q", "--sandbox", "docker", env=run_env)
    _signal_when(killed, lambda: len(scripted_model.requests) >= 4, "the killed run's second model call",
                 signal.SIGKILL)
    assert len(_containers_of(killed.pid)) == 1  # SIGKILL leaves no chance to clean up
    pruned = research("sandbox", "prune", env=run_env)
    assert pruned.exit_code == 0, pruned.stderr
    assert _containers_of(killed.pid) == []
    for workspace in leftover_workspaces(_tmpdir(run_env)):
        shutil.rmtree(workspace, ignore_errors=True)


@pytest.fixture(scope="module")
def many_files_repo(tmp_path_factory) -> Path:
    """A repository of MANY_FILES small files in MANY_FILES_DIRS directories: removing its
    workspace takes long enough to send a second Ctrl-C while it is under way."""
    repo = tmp_path_factory.mktemp("many-files")
    for number in range(MANY_FILES):
        directory = repo / f"d{number % MANY_FILES_DIRS:03d}"
        directory.mkdir(exist_ok=True)
        (directory / f"f{number}.txt").write_text(f"{number}\n")
    git("init", "--quiet", "--initial-branch=main", cwd=repo)
    git("add", "-A", cwd=repo)
    git("-c", "user.name=x", "-c", "user.email=x@x", "commit", "--quiet", "-m", "many", cwd=repo)
    return repo


def test_ctrl_c_during_cleanup_is_held_until_it_is_done(many_files_repo, scripted_model, run_env,  # noqa: F811
                                                        sandbox, sandbox_watch):
    """An impatient second Ctrl-C, sent while the first one's cleanup is removing the workspace, does not cut
    it short: cleanup says it is still working, finishes (container too), and the run exits 130."""
    scripted_model.add(tool_calls(("ls", {})), delay(60, answer("too late")))
    process = start_research("repo", str(many_files_repo), "q", "--sandbox", sandbox, env=run_env)
    try:
        _wait_for(lambda: len(scripted_model.requests) >= 2, "the second model call")
        [workspace] = leftover_workspaces(_tmpdir(run_env))
        if sandbox == "docker":
            workspace = workspace / "workspace"  # the Docker backend's sits in a private parent
        entries = _entries(workspace)
        process.send_signal(signal.SIGINT)
        _wait_for(lambda: _entries(workspace) < entries, "cleanup under way", poll_s=0.001)
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=SIGNAL_WAIT_S) == 130
    finally:
        if process.poll() is None:
            process.kill()
    assert leftover_workspaces(_tmpdir(run_env)) == []
    if sandbox == "docker":
        assert _containers_of(process.pid) == []
    assert "cleaning up the workspace; interrupt again" in process.stderr.read()


@pytest.mark.docker
def test_no_cleanup_in_docker_prints_the_exec_line(docker_engine, source_repo, scripted_model, run_env):  # noqa: F811
    """--no-cleanup with --sandbox docker keeps the container and says how to get a shell in it."""
    scripted_model.add(answer("Kept."))
    result = research("repo", str(source_repo.path), "q", "--sandbox", "docker", "--no-cleanup", "--json",
                      env=run_env)
    assert result.exit_code == 0, result.stderr
    short_id = re.search(r"docker exec -it ([0-9a-f]{12}) sh$", result.stderr, re.MULTILINE)[1]
    [kept_container] = [c for c in running_research_containers() if c.startswith(short_id)]
    kept = Path(json.loads(result.stdout)["workspace"])
    assert f"workspace kept at {kept}" in result.stderr
    assert (kept / "src" / "app.py").exists()
    assert research("sandbox", "prune", env=run_env).exit_code == 0
    assert kept_container not in running_research_containers()


@pytest.mark.docker
def test_a_sandbox_that_cannot_start_stops_the_run_before_the_model_is_asked(docker_engine, source_repo,  # noqa: F811
                                                                              scripted_model, tmp_path):
    """A container the engine refuses (more CPUs than any machine has) fails the run with one sentence,
    exit 1, before a single model call is paid for, and leaves nothing behind."""
    config = write_model_config(tmp_path / "config.toml", scripted_model)
    with config.open("a", encoding="utf-8") as extra:
        extra.write("\n[sandbox]\ncpus = 100000\n")
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    scripted_model.add(answer("No tools needed."))
    result = research("repo", str(source_repo.path), "q", "--sandbox", "docker",
                      env=cli_environment(config=config, tmpdir=tmpdir))
    assert result.exit_code == 1
    assert result.stderr.startswith("research: cannot create the sandbox container: ")
    assert result.stderr.count("\n") == 1 and result.stdout == ""
    assert scripted_model.requests == []
    assert leftover_workspaces(tmpdir) == []
