"""Running the real `research` CLI as a subprocess, the way a user does."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import attrs

CLI_TIMEOUT_S = 120


@attrs.frozen
class CliResult:
    exit_code: int
    stdout: str
    stderr: str


def cli_environment(config: Path | None = None, tmpdir: Path | None = None, **extra: str) -> dict[str, str]:
    """The environment for a CLI subprocess: this one, plus a config file and TMPDIR."""
    env = dict(os.environ)
    env.pop("RESEARCH_MODEL", None)
    env["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    if config is not None:
        env["RESEARCH_CONFIG"] = str(config)
    if tmpdir is not None:
        env["TMPDIR"] = str(tmpdir)
    env.update(extra)
    return env


def research(*args: str, env: dict[str, str] | None = None, timeout: float = CLI_TIMEOUT_S) -> CliResult:
    """Run `research ARGS...` to completion and capture what it printed."""
    completed = subprocess.run(
        [sys.executable, "-m", "dispatcher", *args],
        env=env if env is not None else cli_environment(),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return CliResult(completed.returncode, completed.stdout, completed.stderr)


def start_research(*args: str, env: dict[str, str]) -> subprocess.Popen:
    """Start `research ARGS...` without waiting (for signal tests)."""
    return subprocess.Popen(
        [sys.executable, "-m", "dispatcher", *args],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def leftover_workspaces(tmpdir: Path, mode: str = "repo") -> list[Path]:
    """Workspaces a run left behind under `tmpdir`."""
    return sorted(tmpdir.glob(f"research-{mode}-*"))
