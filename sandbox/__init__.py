"""Workspaces: where a run's content lives and where its tools execute."""

from sandbox.workspace import Command, CommandResult, Entry, ReadResult, Workspace

__all__ = ["Command", "CommandResult", "Entry", "ReadResult", "Workspace", "open_workspace"]


def open_workspace(mode: str, settings) -> Workspace:
    """Open a fresh workspace for `mode` on the backend `settings.backend` names.

    This is the only place that knows which backends exist.
    """
    if settings.backend == "docker":
        from sandbox.docker import DockerWorkspace

        return DockerWorkspace.open(mode, settings)
    from sandbox.local import LocalWorkspace

    return LocalWorkspace.open(mode)
