"""One research run, start to finish: mode → workspace → prepare → agent → report.

The workspace is closed in a `finally`, so an error, Ctrl-C or SIGTERM (which
the CLI turns into KeyboardInterrupt) removes it unless the user asked to keep it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping

import attrs

from config.schema import Config
from dispatcher import interrupts
from dispatcher.progress import Progress
from dispatcher.report import Report, Usage
from modes.base import RunRequest, Sources


@attrs.frozen
class RunOptions:
    """Flags that shape the run itself rather than the configuration."""

    model: str | None = None  # --model, beating the environment and the file


def run_research(
    request: RunRequest,
    config: Config,
    progress: Progress,
    options: RunOptions = RunOptions(),
    environ: Mapping[str, str] = os.environ,
) -> Report:
    from config.models import mode_model_name, resolve_model
    from dispatcher import model as model_client
    from dispatcher.agent import run_agent
    from modes import get_mode
    from sandbox import open_workspace

    started = time.monotonic()
    mode = get_mode(request.mode)
    # Resolve the model (and its key) before cloning: a typo should cost nothing.
    spec = resolve_model(options.model or mode_model_name(config, mode.name), config, environ)
    # litellm takes seconds to import; let that overlap with the clone or fetch.
    model_client.warm_up()
    keep = not config.defaults.cleanup
    workspace = None
    try:
        # Held, so that an interrupt cannot land between making the workspace
        # and this `try` knowing of it.
        with interrupts.held():
            workspace = open_workspace(mode.name, config.sandbox)
        sources = Sources()
        user_message = mode.prepare(workspace, request, config, progress.status)
        workspace.after_prepare()
        tools = mode.tools(workspace, config, sources)
        client = model_client.ModelClient(spec)
        result = run_agent(
            client,
            system_prompt=mode.system_prompt(),
            user_message=user_message,
            tools=tools,
            max_steps=config.defaults.max_steps,
            on_event=progress.event,
        )
        citations = mode.citations(result.answer, workspace, sources)
    finally:
        with interrupts.held(interrupts.CLEANUP_NOTICE):
            progress.finish()
            if workspace is not None:
                workspace.close(keep=keep)
    if keep:
        progress.notice(workspace.kept_message())
    return Report(
        answer=result.answer,
        mode=mode.name,
        model=spec.litellm_model,
        sources=tuple(sources.items()),
        citations=citations.verified,
        unverified_citations=citations.unverified,
        usage=Usage(result.prompt_tokens, result.completion_tokens, result.cost_usd),
        steps=result.steps,
        tool_calls=result.tool_calls,
        stopped=result.stopped,
        workspace=str(workspace.host_dir) if keep else None,
        elapsed_s=time.monotonic() - started,
        list_sources=getattr(mode, "lists_sources", False),
    )

