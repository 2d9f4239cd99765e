"""What a whole `research repo` run costs on Docker over the temp-dir backend.

    python bench/docker_run_overhead.py [runs]

The same scripted repo-mode run, through the CLI's own entry point (argument
parsing, a real clone, litellm's real HTTP path to a scripted model on
127.0.0.1, the report), once with `--sandbox local` and once with `--sandbox
docker`, back to back so that drift in the machine hits both alike. It runs
in this process, so that importing litellm (4-10 s here, the same for both
backends and far noisier than what is measured) is paid once, not per run.

The model calls one tool a turn, cycling through every repo-mode tool. The
time spent inside tool calls is summed during the run (Tool.invoke is timed),
which splits Docker's overhead into a part per tool call and a part per run
(container start not hidden by the clone, hand-over, removal).
Goals: <= 1.5 s a run and <= 40 ms a call on this machine.

Needs a running engine and the sandbox image (scripts/setup-docker.sh).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

# Run from a checkout: the scripted model and the fixture repository live with the tests.
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from dispatcher.cli import main as research  # noqa: E402
from modes.tools.definition import Tool  # noqa: E402
from tests.support.git_repos import build_source_repo  # noqa: E402
from tests.support.scripted_model import FAKE_API_KEY, SCRIPTED_LITELLM_MODEL, answer, tool_calls  # noqa: E402

RUNS = int(sys.argv[1]) if len(sys.argv) > 1 else 7
RUN_GOAL_S = 1.5
CALL_GOAL_S = 0.040
# One call a turn, so calls run one after another as the per-call goal means.
TOOL_CYCLE = [
    ("read", {"path": "src/app.py"}),
    ("grep", {"pattern": "greet"}),
    ("ls", {"path": "."}),
    ("find", {"pattern": "*.md"}),
    ("git_log", {}),
    ("git_show", {"ref": "HEAD"}),
    ("git_blame", {"path": "src/app.py"}),
    ("git_diff", {"from_ref": "v0.1", "to_ref": "HEAD"}),
    ("git_refs", {}),
]
CALLS = 2 * len(TOOL_CYCLE)


class ToolClock:
    """Seconds spent inside tool calls, per tool name, while installed."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._invoke = Tool.invoke
        clock = self

        def timed(tool: Tool, raw_arguments):
            started = time.perf_counter()
            try:
                return clock._invoke(tool, raw_arguments)
            finally:
                clock.seconds[tool.name] = clock.seconds.get(tool.name, 0.0) + time.perf_counter() - started

        Tool.invoke = timed

    def total(self) -> float:
        return sum(self.seconds.values())


def script(calls: int) -> list[dict]:
    turns = [tool_calls(TOOL_CYCLE[n % len(TOOL_CYCLE)]) for n in range(calls)]
    return [*turns, answer("`greet` returns 'hello' (src/app.py:6).")]


def timed_run(repo: Path, sandbox: str, clock: ToolClock) -> tuple[float, float, dict]:
    """(wall seconds, seconds inside tools, per-tool seconds) of one run."""
    clock.seconds = {}
    printed = io.StringIO()
    started = time.perf_counter()
    with contextlib.redirect_stdout(printed):
        code = research(["repo", str(repo), "What does greet return?", "--sandbox", sandbox,
                         "--max-steps", str(CALLS + 1), "--json"])
    elapsed = time.perf_counter() - started
    if code != 0:
        raise SystemExit(f"the {sandbox} run failed with exit code {code}")
    report = json.loads(printed.getvalue())
    if report["tool_calls"] != CALLS or report["stopped"] != "answer":
        raise SystemExit(f"the {sandbox} run made {report['tool_calls']} calls, not {CALLS}: {report}")
    return elapsed, clock.total(), dict(clock.seconds)


@contextlib.contextmanager
def scripted_model_process(turns: list[dict], scratch: Path) -> Iterator[int]:
    """The scripted model in a process of its own (yields its port): in this
    one, its replies would wait on our interpreter lock, more in some runs
    than in others."""
    (scratch / "script.json").write_text(json.dumps(turns), encoding="utf-8")
    port_file = scratch / "model.port"
    server = subprocess.Popen([sys.executable, "-m", "tests.support.scripted_model", "--script",
                               str(scratch / "script.json"), "--port-file", str(port_file)],
                              cwd=ROOT, stdout=subprocess.DEVNULL)
    try:
        while not port_file.exists():
            if server.poll() is not None:
                raise SystemExit("the scripted model server did not start")
            time.sleep(0.05)
        yield int(port_file.read_text())
    finally:
        server.terminate()
        server.wait()


def main() -> None:
    clock = ToolClock()
    warm_ups, measured = 2, 2 * RUNS
    with tempfile.TemporaryDirectory(prefix="research-bench-") as scratch_dir:
        scratch = Path(scratch_dir)
        with scripted_model_process(script(CALLS) * (warm_ups + measured), scratch) as port:
            repo = build_source_repo(scratch / "repos").path
            tmpdir = scratch / "tmp"
            tmpdir.mkdir()
            config = scratch / "config.toml"
            config.write_text(f'[defaults]\nmodel = "scripted"\n[models.scripted]\nmodel = "{SCRIPTED_LITELLM_MODEL}"\n'
                              f'api_base = "http://127.0.0.1:{port}/v1"\napi_key = "{FAKE_API_KEY}"\n'
                              f"context_window = 100000\n", encoding="utf-8")
            os.environ.update(LITELLM_LOCAL_MODEL_COST_MAP="True", TMPDIR=str(tmpdir), RESEARCH_CONFIG=str(config))
            os.environ.pop("RESEARCH_MODEL", None)
            tempfile.tempdir = None  # take TMPDIR from the environment set above
            for sandbox in ("local", "docker"):  # import litellm, warm the engine and the page cache
                timed_run(repo, sandbox, clock)
            runs: dict[str, list[tuple[float, float, dict]]] = {"local": [], "docker": []}
            for _ in range(RUNS):
                for sandbox in ("local", "docker"):
                    runs[sandbox].append(timed_run(repo, sandbox, clock))
    wall = {sandbox: statistics.median(run[0] for run in runs[sandbox]) for sandbox in runs}
    in_tools = {sandbox: statistics.median(run[1] for run in runs[sandbox]) for sandbox in runs}
    # Differences within each back-to-back pair, then their median: drift cancels.
    pairs = list(zip(runs["local"], runs["docker"]))
    per_call = statistics.median(docker[1] - local[1] for local, docker in pairs) / CALLS
    per_run = statistics.median((docker[0] - docker[1]) - (local[0] - local[1]) for local, docker in pairs)
    print(f"whole `research repo` runs of {CALLS} tool calls, median of {RUNS} each")
    print("               whole run   inside tools")
    for sandbox in ("local", "docker"):
        print(f"  {sandbox:8s} {wall[sandbox]:10.2f} s {in_tools[sandbox] * 1000:11.0f} ms")
    print("per call, by tool (median over runs, two calls each)    local     docker")
    for name, _ in TOOL_CYCLE:
        local = statistics.median(run[2][name] for run in runs["local"]) / 2
        docker = statistics.median(run[2][name] for run in runs["docker"]) / 2
        print(f"  {name:12s} {local * 1000:48.1f} ms {docker * 1000:7.1f} ms")
    print(f"docker overhead per tool call: {per_call * 1000:.1f} ms")
    print(f"docker overhead per run, outside tool calls: {per_run * 1000:.0f} ms")
    print(f"goal: run <= {RUN_GOAL_S} s -> {'met' if per_run <= RUN_GOAL_S else 'MISSED'}")
    print(f"goal: call <= {CALL_GOAL_S * 1000:.0f} ms -> {'met' if per_call <= CALL_GOAL_S else 'MISSED'}")


if __name__ == "__main__":
    main()
