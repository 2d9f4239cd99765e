"""The agent loop: ask the model, run the tools it calls, repeat until it answers.

`run_agent` reads like the algorithm; budgets, context trimming, concurrency
and error wording live in the small helpers below it. Two kinds of failure are
kept apart: the *model* erring (bad arguments, an unknown tool, a tool that
crashed on its input) is worded for the model and sent back so it can correct
itself, while *our* failures (a ResearchError such as a rejected search key, a
model that cannot be reached) end the run and reach the user.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import attrs

from dispatcher.context import fit_to_window, input_budget, token_counter
from dispatcher.errors import ModelError, ResearchError
from dispatcher.model import ModelClient, ModelTurn, ToolCall, context_window
from modes.tools.definition import Tool

DEFAULT_MAX_PARALLEL_TOOLS = 8
STEP_LIMIT_MESSAGE = "You have reached the step limit. Answer now from what you have gathered; cite your sources."
EMPTY_REPLY_NUDGE = "Your reply was empty: answer the question or call a tool."
MAX_TOOL_ERROR_CHARS = 300


# -- events, for progress on stderr ---------------------------------------------------------
@attrs.frozen
class StepStarted:
    step: int
    max_steps: int


@attrs.frozen
class ToolStarted:
    name: str
    arguments: str


@attrs.frozen
class ToolFinished:
    name: str
    arguments: str
    result_chars: int
    elapsed_s: float
    error: str | None  # what went wrong, worded as the model saw it; None on success


@attrs.frozen
class ModelRetry:
    attempt: int
    delay_s: float
    reason: str


@attrs.frozen
class ContextElided:
    count: int


OnEvent = Callable[[Any], None]


@attrs.frozen
class AgentResult:
    answer: str
    steps: int  # model calls, including a nudge or the step-limit call
    stopped: str  # "answer" | "max_steps"
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float
    tool_calls: int
    elided: int


def _ignore(event: Any) -> None:
    """The default on_event: nobody is listening."""


# -- the loop -------------------------------------------------------------------------------
def run_agent(
    client: ModelClient,
    *,
    system_prompt: str,
    user_message: str,
    tools: list[Tool],
    max_steps: int,
    on_event: OnEvent = _ignore,
    max_parallel_tools: int = DEFAULT_MAX_PARALLEL_TOOLS,
) -> AgentResult:
    """Run the model with `tools` until it answers, or until `max_steps` forces an answer."""
    toolbox = _Toolbox(tools, on_event)
    conversation = _Conversation(client, system_prompt, user_message, toolbox.schemas, on_event)
    nudged = False
    with _tool_pool(max_parallel_tools) as pool:
        for step in range(1, max_steps + 1):
            on_event(StepStarted(step, max_steps))
            turn = conversation.ask(with_tools=True)
            if turn.tool_calls:
                conversation.add(turn.as_message(), *toolbox.run(pool, turn.tool_calls))
            elif _text(turn):
                return conversation.result(_text(turn), stopped="answer")
            elif not nudged:
                nudged = True  # some models end a turn with nothing; one reminder usually suffices
                conversation.add({"role": "user", "content": EMPTY_REPLY_NUDGE})
            else:
                raise ModelError(f"model {client.spec.name!r} replied with nothing twice; try again or another model")
    conversation.add({"role": "user", "content": STEP_LIMIT_MESSAGE})
    turn = conversation.ask(with_tools=False)
    if not _text(turn):
        raise ModelError(f"model {client.spec.name!r} gave no answer at the step limit of {max_steps}")
    return conversation.result(_text(turn), stopped="max_steps")


def _text(turn: ModelTurn) -> str:
    return (turn.content or "").strip()


# -- helpers the loop calls -----------------------------------------------------------------
class _Conversation:
    """The messages so far, kept inside the context window, and the run's running totals."""

    def __init__(self, client: ModelClient, system_prompt: str, user_message: str,
                 schemas: list[dict], on_event: OnEvent) -> None:
        self.client = client
        self.schemas = schemas
        self.on_event = on_event
        self.messages: list[dict[str, Any]] = [
            {"role": "system", "content": system_prompt},
            {"role": "user", "content": user_message},
        ]
        self.count_tokens = token_counter(client.spec.litellm_model)
        schema_tokens = self.count_tokens(json.dumps(schemas)) if schemas else 0
        self.budget_tokens = input_budget(context_window(client.spec), client.spec.max_output_tokens, schema_tokens)
        self.steps = self.prompt_tokens = self.completion_tokens = self.elided = 0
        self.cost_usd = 0.0

    def add(self, *messages: dict[str, Any]) -> None:
        self.messages.extend(messages)

    def ask(self, *, with_tools: bool) -> ModelTurn:
        """One model call, after trimming the conversation to fit."""
        self.messages, elided = fit_to_window(self.messages, self.budget_tokens, self.count_tokens)
        if elided:
            self.elided += elided
            self.on_event(ContextElided(elided))
        turn = self.client.complete(
            self.messages,
            self.schemas if with_tools else None,
            on_retry=lambda attempt, delay_s, reason: self.on_event(ModelRetry(attempt, delay_s, reason)),
        )
        self.steps += 1
        self.prompt_tokens += turn.prompt_tokens
        self.completion_tokens += turn.completion_tokens
        self.cost_usd += turn.cost_usd
        return turn

    def result(self, answer: str, *, stopped: str) -> AgentResult:
        return AgentResult(answer=answer, steps=self.steps, stopped=stopped, prompt_tokens=self.prompt_tokens,
                           completion_tokens=self.completion_tokens, cost_usd=self.cost_usd,
                           tool_calls=sum(m["role"] == "tool" for m in self.messages), elided=self.elided)


class _tool_pool:  # noqa: N801 (used like a function: `with _tool_pool(n) as pool`)
    """A bounded thread pool that, on Ctrl-C or an aborting error, does not wait for running tools."""

    def __init__(self, workers: int) -> None:
        self.pool = ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="tool")

    def __enter__(self) -> ThreadPoolExecutor:
        return self.pool

    def __exit__(self, exc_type: type | None, *rest: object) -> None:
        # Tools have their own time limits; on an error the run is over and nobody needs their output.
        self.pool.shutdown(wait=exc_type is None, cancel_futures=exc_type is not None)


class _Toolbox:
    """Runs one turn's tool calls concurrently and words every outcome for the model."""

    def __init__(self, tools: list[Tool], on_event: OnEvent) -> None:
        self.by_name = {tool.name: tool for tool in tools}
        self.schemas = [tool.schema() for tool in tools]
        self.on_event = on_event

    def run(self, pool: ThreadPoolExecutor, calls: tuple[ToolCall, ...]) -> list[dict[str, Any]]:
        """Tool-result messages, in the order of the calls; a ResearchError from any tool propagates."""
        futures = [pool.submit(self._run_one, call) for call in calls]
        return [
            {"role": "tool", "tool_call_id": call.id, "content": future.result()}
            for call, future in zip(calls, futures)
        ]

    def _run_one(self, call: ToolCall) -> str:
        self.on_event(ToolStarted(call.name, call.arguments))
        started = time.monotonic()
        error = None
        tool = self.by_name.get(call.name)
        if tool is None:
            names = ", ".join(self.by_name) or "none"
            result = f"Error: there is no tool named {call.name!r}; the tools are: {names}"
        else:
            try:
                result = str(tool.invoke(call.arguments))
            except ResearchError:
                raise  # ours, not the model's: e.g. a rejected search API key ends the run
            except Exception as exc:  # a tool crashing on odd input must not end the run; the model can adapt
                error = _one_line(f"{type(exc).__name__}: {exc}")
                result = f"Error: tool failed: {error}"
        if result.startswith("Error: "):
            error = error or result.removeprefix("Error: ")
        self.on_event(ToolFinished(call.name, call.arguments, len(result), time.monotonic() - started, error))
        return result


def _one_line(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= MAX_TOOL_ERROR_CHARS else line[: MAX_TOOL_ERROR_CHARS - 1] + "…"
