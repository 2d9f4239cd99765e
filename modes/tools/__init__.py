"""Tools the agent can call, built by factories closed over a workspace."""

from modes.tools.definition import Tool, tool

__all__ = ["Tool", "tool"]
