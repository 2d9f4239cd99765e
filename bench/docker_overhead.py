"""What the Docker backend costs over the local one: per run and per tool call.

    python bench/docker_overhead.py [runs]

Per run: open a workspace, make it ready (the container started and answering
its first call), close it. Two figures for Docker: the whole lifecycle, and the
part a run actually waits for when the container starts while the clone runs
(open() returns at once; the first call waits for whatever is left).
Per call: read_bytes, list_dir and run(["git", "--version"]) on a ready workspace.
The local backend, measured in the same run, is the baseline.

Goals: <= 1.5 s per run and <= 40 ms per tool call for Docker. Needs a running
engine and the sandbox image (scripts/setup-docker.sh).
"""

from __future__ import annotations

import statistics
import sys
import time

from config.schema import SandboxSettings
from sandbox import open_workspace
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
        workspace.after_prepare()
        workspace.resolve(".")
        calls = {
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
    print(f"per tool call (median of {CALLS})")
    for name in local_calls:
        ratio = docker_calls[name] / local_calls[name]
        print(f"  {name:18s} local {local_calls[name] * 1000:6.1f} ms   docker {docker_calls[name] * 1000:6.1f} ms"
              f"   {ratio:6.1f}x   +{(docker_calls[name] - local_calls[name]) * 1000:.1f} ms")
    worst_call = max(docker_calls.values())
    print(f"goal: run <= {RUN_GOAL_S} s -> {'met' if docker_run <= RUN_GOAL_S else 'MISSED'} "
          f"({docker_run:.2f} s)")
    print(f"goal: call <= {CALL_GOAL_S * 1000:.0f} ms -> {'met' if worst_call <= CALL_GOAL_S else 'MISSED'} "
          f"({worst_call * 1000:.1f} ms, slowest of the three)")


if __name__ == "__main__":
    main()
