"""How long `research --help` and a usage error take, against bare Python start-up.

    python bench/cli_startup.py [runs]

Goal: `research --help` under 0.3 s. The baseline is `python -c pass` measured in
the same run, so the ratio says what our imports cost on this machine today.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time

RUNS = int(sys.argv[1]) if len(sys.argv) > 1 else 15


def median_seconds(argv: list[str]) -> float:
    timings = []
    for _ in range(RUNS):
        started = time.perf_counter()
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        timings.append(time.perf_counter() - started)
    return statistics.median(timings)


def main() -> None:
    baseline = median_seconds([sys.executable, "-c", "pass"])
    rows = [
        ("python -c pass (baseline)", baseline),
        ("research --help", median_seconds([sys.executable, "-m", "dispatcher", "--help"])),
        ("research repo --help", median_seconds([sys.executable, "-m", "dispatcher", "repo", "--help"])),
        ("research repo (usage error)", median_seconds([sys.executable, "-m", "dispatcher", "repo"])),
    ]
    print(f"median of {RUNS} runs")
    for name, seconds in rows:
        print(f"{name:32s} {seconds * 1000:7.1f} ms   {seconds / baseline:5.2f}x baseline")
    help_s = rows[1][1]
    print(f"goal: research --help < 300 ms -> {'met' if help_s < 0.3 else 'MISSED'} ({help_s * 1000:.0f} ms)")


if __name__ == "__main__":
    main()
