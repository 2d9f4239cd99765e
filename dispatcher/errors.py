"""The one error tree of `research`, and the exit code each branch maps to.

    ResearchError                 exit 1: something failed at run time
    ├── UsageError                exit 2: the user must fix a flag or argument
    │   └── ConfigError           exit 2: ... or the configuration file
    ├── CloneError                the repository could not be cloned
    ├── FetchError                a page could not be fetched
    ├── SearchError               no search provider could answer
    ├── WorkspaceError            the workspace could not be opened or used
    │   └── SandboxError          the Docker engine, image or container failed
    ├── ModelError                the model could not be reached or answered badly
    └── ToolInputError            the *model* called a tool wrongly; never reaches
                                  the user: the agent loop sends it back to the model

Third-party errors (git, httpx, litellm, docker) are translated into this tree
where they enter our code, with ``raise ... from exc``. Every message is one
sentence a user can act on.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


class ResearchError(Exception):
    """Base of every error `research` raises on purpose."""

    exit_code = EXIT_FAILURE


class UsageError(ResearchError):
    """A flag or argument is wrong; the message names it."""

    exit_code = EXIT_USAGE


class ConfigError(UsageError):
    """The configuration is wrong; the message names the file, line and key."""


class CloneError(ResearchError):
    """The repository could not be cloned or the ref could not be fetched."""


class FetchError(ResearchError):
    """A URL could not be fetched safely."""


class SearchError(ResearchError):
    """The web search provider could not answer at all."""


class WorkspaceError(ResearchError):
    """The workspace could not be created, used or removed."""


class SandboxError(WorkspaceError):
    """The Docker engine, the sandbox image or a container failed."""


class ModelError(ResearchError):
    """The model endpoint failed after every retry, or refused the request."""


class ToolInputError(ResearchError):
    """A tool was called with input it refuses; worded for the model, not the user."""
