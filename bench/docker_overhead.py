"""What the Docker backend costs over the local one: per run and per tool call.

    python bench/docker_overhead.py [runs]

Per run: open a workspace, make it ready (the container started and answering
its first call), close it. Two figures for Docker: the whole lifecycle, and the
part a run actually waits for when the container starts while the clone runs
(open() returns at once; the first call waits for whatever is left).
Per call: the read and grep tools as the model calls them, and the workspace's
read_bytes, list_dir and run(["git", "--version"]), on a ready workspace. The
local backend, measured in the same run, is the baseline; Docker is measured
twice, through its command servers (what runs use) and with one `docker exec`
per call (what they fall back to), to show what the servers save.

Goals: <= 1.5 s per run and <= 40 ms per tool call for Docker. Needs a running
engine and the sandbox image (scripts/setup-docker.sh).
"""

from __future__ import annotations

import statistics
import sys
import time

from config.schema import SandboxSettings
from modes.base import Sources
from modes.tools.files import file_tools
from sandbox import docker_channel, open_workspace
from sandbox.workspace import Command

RUNS = int(sys.argv[1]) if len(sys.argv) > 1 else 8
CALLS = 30
# A stand-in for the clone that overlaps container start-up.
SIMULATED_CLONE_S = 1.0
RUN_GOAL_S = 1.5
CALL_GOAL_S = 0.040


def lifecycle(settings: SandboxSettings) -> float:
    started = time.perf_counter()
    workspace = open_workspace("repo", settings)
    workspace.write_bytes("README.md", b"# bench\n")
    workspace.after_prepare()
    workspace.resolve(".")
    workspace.close()
    return time.perf_counter() - started


def waited_with_clone(settings: SandboxSettings) -> float:
    """Seconds the run spends on the workspace beyond a clone of SIMULATED_CLONE_S."""
    started = time.perf_counter()
    workspace = open_workspace("repo", settings)
    opened = time.perf_counter() - started
    time.sleep(SIMULATED_CLONE_S)  # the clone, on the host, meanwhile
    ready_started = time.perf_counter()
    workspace.after_prepare()
    workspace.resolve(".")
    ready = time.perf_counter() - ready_started
    close_started = time.perf_counter()
    workspace.close()
    return opened + ready + (time.perf_counter() - close_started)


def per_call(settings: SandboxSettings) -> dict[str, float]:
    workspace = open_workspace("repo", settings)
    try:
        workspace.write_bytes("README.md", b"# bench\n" * 100)
        workspace.write_bytes("src/app.py", b"def main():\n    return 'bench'\n" * 50)
        workspace.after_prepare()
        workspace.resolve(".")
        tools = {tool.name: tool for tool in file_tools(workspace, Sources())}
        calls = {
            "read tool": lambda: tools["read"].invoke('{"path": "src/app.py"}'),
            "grep tool": lambda: tools["grep"].invoke('{"pattern": "bench"}'),
            "read_bytes": lambda: workspace.read_bytes("README.md", 10_000),
            "list_dir": lambda: workspace.list_dir("."),
            "run git --version": lambda: workspace.run(Command(["git", "--version"])),
        }
        medians = {}
        for name, call in calls.items():
            timings = []
            for _ in range(CALLS):
                started = time.perf_counter()
                call()
                timings.append(time.perf_counter() - started)
            medians[name] = statistics.median(timings)
        return medians
    finally:
        workspace.close()


def main() -> None:
    local = SandboxSettings(backend="local")
    docker = SandboxSettings(backend="docker")
    lifecycle(docker)  # warm the engine's caches before measuring
    local_run = statistics.median(lifecycle(local) for _ in range(RUNS))
    docker_run = statistics.median(lifecycle(docker) for _ in range(RUNS))
    docker_waited = statistics.median(waited_with_clone(docker) for _ in range(RUNS))
    print(f"per run (median of {RUNS}): open, first call, close")
    print(f"  local                         {local_run * 1000:8.1f} ms")
    print(f"  docker                        {docker_run * 1000:8.1f} ms   {docker_run / local_run:7.1f}x local")
    print(f"  docker, beyond a {SIMULATED_CLONE_S:.0f} s clone    {docker_waited * 1000:8.1f} ms")
    local_calls, docker_calls = per_call(local), per_call(docker)
    servers = docker_channel.MAX_CHANNELS
    docker_channel.MAX_CHANNELS = 0  # no command servers: one exec per call, the fallback
    exec_calls = per_call(docker)
    docker_channel.MAX_CHANNELS = servers
    print(f"per call (median of {CALLS})        local     docker   (+ over local)   one exec each")
    for name in local_calls:
        print(f"  {name:18s} {local_calls[name] * 1000:8.1f} ms {docker_calls[name] * 1000:7.1f} ms"
              f"   (+{(docker_calls[name] - local_calls[name]) * 1000:5.1f} ms)   {exec_calls[name] * 1000:8.1f} ms"
              f"  ({exec_calls[name] / docker_calls[name]:.1f}x slower)")
    worst_call = max(docker_calls.values())
    print(f"goal: run <= {RUN_GOAL_S} s -> {'met' if docker_run <= RUN_GOAL_S else 'MISSED'} "
          f"({docker_run:.2f} s)")
    print(f"goal: call <= {CALL_GOAL_S * 1000:.0f} ms -> {'met' if worst_call <= CALL_GOAL_S else 'MISSED'} "
          f"({worst_call * 1000:.1f} ms, the slowest above)")


if __name__ == "__main__":
    main()
