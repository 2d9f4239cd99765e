"""The research modes, by name."""

from __future__ import annotations

MODE_NAMES = ("repo", "web")


def get_mode(name: str):
    """The Mode object for `name` (imported lazily: modes pull in heavy libraries)."""
    if name == "repo":
        from modes.repo import RepoMode

        return RepoMode()
    if name == "web":
        from modes.web import WebMode

        return WebMode()
    raise ValueError(f"unknown mode {name!r}")
