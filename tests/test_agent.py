"""The agent loop, driven end to end by a scripted model through litellm's real code path."""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path
from typing import Annotated

import pytest

from dispatcher.agent import (
    EMPTY_REPLY_NUDGE,
    STEP_LIMIT_MESSAGE,
    ContextElided,
    ModelRetry,
    StepStarted,
    ToolFinished,
    ToolStarted,
    run_agent,
)
from dispatcher.context import ELIDED_PREFIX, estimate_tokens, fit_to_window, token_counter
from dispatcher.errors import ModelError, SearchError
from dispatcher.model import ModelClient
from modes.tools.definition import tool
from tests.support.scripted_model import (
    answer,
    error,
    scripted_model,  # noqa: F401
    scripted_spec,
    tool_calls,
)

SYSTEM = "You are a careful research agent."
QUESTION = "Where is main defined?"
BARRIER_TIMEOUT_S = 5


def client_for(server, **spec_overrides) -> ModelClient:
    return ModelClient(scripted_spec(server, **spec_overrides), backoff_base_s=0.01)


def file_tools(root: Path):
    """Two small real tools over a directory: enough for the loop to explore something."""

    @tool
    def grep(pattern: Annotated[str, "Text to look for."]) -> str:
        """List lines containing a text, as path:line: text."""
        hits = [f"{p.name}:{n}: {line}" for p in sorted(root.iterdir())
                for n, line in enumerate(p.read_text().splitlines(), 1) if pattern in line]
        return "\n".join(hits) or "no matches"

    @tool
    def read(path: Annotated[str, "File name."], offset: Annotated[int, "First line, 1-based."] = 1) -> str:
        """Read a file as numbered lines."""
        lines = (root / path).read_text().splitlines()[offset - 1:]
        return "\n".join(f"{n}\t{line}" for n, line in enumerate(lines, offset))

    return [grep, read]


def tool_results(request: dict) -> list[dict]:
    return [m for m in request["messages"] if m["role"] == "tool"]


def run(server, tools, *, max_steps=10, events=None, **spec_overrides):
    on_event = events.append if events is not None else (lambda event: None)
    return run_agent(client_for(server, **spec_overrides), system_prompt=SYSTEM, user_message=QUESTION,
                     tools=tools, max_steps=max_steps, on_event=on_event)


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_grep_then_read_then_answer(scripted_model, tmp_path, stream):
    """The model greps, reads what it found, then answers; each result goes back under its call's id."""
    (tmp_path / "cli.py").write_text("import sys\n\ndef main():\n    return 0\n")
    scripted_model.add(
        tool_calls(("grep", {"pattern": "def main"})),
        tool_calls(("read", {"path": "cli.py", "offset": 3})),
        answer("main is defined in cli.py:3"),
    )
    events: list = []
    result = run(scripted_model, file_tools(tmp_path), events=events, stream=stream)

    assert result.answer == "main is defined in cli.py:3"
    assert (result.stopped, result.steps, result.tool_calls, result.elided) == ("answer", 3, 2, 0)
    assert (result.prompt_tokens, result.completion_tokens) == (300, 60)
    first, second, third = scripted_model.requests
    assert first["messages"] == [{"role": "system", "content": SYSTEM}, {"role": "user", "content": QUESTION}]
    assert [t["function"]["name"] for t in first["tools"]] == ["grep", "read"]
    grep_call = second["messages"][2]["tool_calls"][0]
    assert grep_call["function"] == {"name": "grep", "arguments": '{"pattern": "def main"}'}
    assert tool_results(second) == [
        {"role": "tool", "tool_call_id": grep_call["id"], "content": "cli.py:3: def main():"}
    ]
    assert tool_results(third)[-1]["content"] == "3\tdef main():\n4\t    return 0"
    assert [type(e) for e in events] == [StepStarted, ToolStarted, ToolFinished,
                                         StepStarted, ToolStarted, ToolFinished, StepStarted]


def test_tool_calls_of_one_turn_run_concurrently_and_reply_in_order(scripted_model):
    """Two calls in one turn run at the same time (each waits for the other) and results keep call order."""
    barrier = threading.Barrier(2, timeout=BARRIER_TIMEOUT_S)

    @tool
    def meet(name: Annotated[str, "Who is meeting."]) -> str:
        """Wait until the other caller arrives."""
        barrier.wait()  # raises BrokenBarrierError if the calls ran one after the other
        return f"{name} met the other"

    scripted_model.add(tool_calls(("meet", {"name": "first"}), ("meet", {"name": "second"})), answer("both met"))
    result = run(scripted_model, [meet])

    assert result.answer == "both met"
    results = tool_results(scripted_model.requests[1])
    assert [r["content"] for r in results] == ["first met the other", "second met the other"]
    calls = scripted_model.requests[1]["messages"][2]["tool_calls"]
    assert [r["tool_call_id"] for r in results] == [c["id"] for c in calls]


def test_model_mistakes_are_sent_back_and_the_run_still_answers(scripted_model, tmp_path):
    """Malformed JSON, an unknown tool, a wrong type and a missing argument each get an error the model can act on."""
    (tmp_path / "a.py").write_text("x = 1\n")
    scripted_model.add(
        tool_calls(("read", '{"path": "a.py"'),
                   ("delete_everything", {"path": "/"}),
                   ("read", {"path": "a.py", "offset": "three"}),
                   ("grep", {})),
        answer("I could not read it, sorry"),
    )
    events: list = []
    result = run(scripted_model, file_tools(tmp_path), events=events)

    assert result.stopped == "answer" and result.answer == "I could not read it, sorry"
    malformed, unknown, wrong_type, missing = (r["content"] for r in tool_results(scripted_model.requests[1]))
    assert malformed.startswith("Error: arguments are not valid JSON")
    assert unknown == "Error: there is no tool named 'delete_everything'; the tools are: grep, read"
    assert wrong_type == "Error: argument 'offset' must be an integer, not str \"three\""
    assert missing == "Error: missing required argument 'pattern'"
    finished = [e for e in events if isinstance(e, ToolFinished)]
    assert all(e.error for e in finished)


def test_step_limit_forces_a_final_answer_without_tools(scripted_model, tmp_path):
    """At max_steps the model is asked once more, with no tools, to answer from what it gathered."""
    (tmp_path / "a.py").write_text("def main(): pass\n")
    scripted_model.add(
        tool_calls(("grep", {"pattern": "main"})),
        tool_calls(("grep", {"pattern": "def"})),
        answer("From what I gathered: a.py:1"),
    )
    result = run(scripted_model, file_tools(tmp_path), max_steps=2)

    assert (result.stopped, result.steps, result.answer) == ("max_steps", 3, "From what I gathered: a.py:1")
    final = scripted_model.requests[-1]
    assert "tools" not in final
    assert final["messages"][-1] == {"role": "user", "content": STEP_LIMIT_MESSAGE}
    assert tool_results(final)[-1]["content"] == "a.py:1: def main(): pass"  # the last results are kept
    assert all("tools" in request for request in scripted_model.requests[:-1])


def test_oldest_tool_result_is_elided_when_the_window_fills(scripted_model):
    """When two big results overflow the window, the older one is replaced by a note the model can act on."""
    page = "The quick brown fox jumps over the lazy dog near the river bank. " * 100
    count = token_counter("openai/scripted-model")
    assert 1_000 < count(page) < 1_600  # one page fits the budget below, two do not

    @tool
    def fetch(url: Annotated[str, "Page to fetch."]) -> str:
        """Fetch a page."""
        return f"{url}\n{page}"

    scripted_model.add(tool_calls(("fetch", {"url": "one"})), tool_calls(("fetch", {"url": "two"})),
                       answer("done"))
    events: list = []
    result = run(scripted_model, [fetch], events=events, context_window=4_000)

    assert result.elided == 1 and ContextElided(1) in events
    assert [r["content"].split("\n")[0] for r in tool_results(scripted_model.requests[1])] == ["one"]
    older, newer = tool_results(scripted_model.requests[2])
    assert older["content"].startswith(ELIDED_PREFIX) and "call the tool again" in older["content"]
    assert f"({len(page) + 4:,} chars)" in older["content"]
    assert newer["content"].startswith("two\n")
    assert scripted_model.requests[2]["messages"][:2] == scripted_model.requests[0]["messages"]


def test_crashing_tool_becomes_an_error_for_the_model(scripted_model):
    """A tool that raises an unexpected exception tells the model it failed, and the run goes on."""

    @tool
    def divide(n: Annotated[int, "Divisor."]) -> str:
        """Divide ten by n."""
        return str(10 // n)

    scripted_model.add(tool_calls(("divide", {"n": 0})), answer("cannot divide by zero"))
    events: list = []
    result = run(scripted_model, [divide], events=events)

    assert result.answer == "cannot divide by zero"
    (message,) = tool_results(scripted_model.requests[1])
    assert message["content"] == "Error: tool failed: ZeroDivisionError: integer division or modulo by zero"
    (finished,) = [e for e in events if isinstance(e, ToolFinished)]
    assert finished.error == "ZeroDivisionError: integer division or modulo by zero"


def test_research_error_from_a_tool_ends_the_run(scripted_model):
    """A ResearchError (here a rejected search key) is ours, not the model's: it reaches the caller."""

    @tool
    def search(query: Annotated[str, "What to search for."]) -> str:
        """Search the web."""
        raise SearchError("brave rejected the API key (HTTP 401); check [web.brave] api_key")

    scripted_model.add(tool_calls(("search", {"query": "widgets"})), answer("never asked"))
    with pytest.raises(SearchError, match="brave rejected the API key"):
        run(scripted_model, [search])
    assert len(scripted_model.requests) == 1


def test_empty_reply_gets_one_nudge(scripted_model):
    """A reply with neither text nor tool calls is answered with one reminder, then the answer counts."""
    scripted_model.add(answer(""), answer("here it is"))
    result = run(scripted_model, [])
    assert (result.answer, result.steps) == ("here it is", 2)
    assert scripted_model.requests[1]["messages"][-1] == {"role": "user", "content": EMPTY_REPLY_NUDGE}


def test_two_empty_replies_fail_with_one_sentence(scripted_model):
    """A model that keeps replying with nothing ends the run with a clear error instead of an empty answer."""
    scripted_model.add(answer(""), answer("   "))
    with pytest.raises(ModelError, match="replied with nothing twice"):
        run(scripted_model, [])


def test_model_retries_are_reported_as_events(scripted_model):
    """A retried model call shows up as a ModelRetry event, so the CLI can say why it is waiting."""
    scripted_model.add(error(503), answer("recovered"))
    events: list = []
    assert run(scripted_model, [], events=events).answer == "recovered"
    (retry,) = [e for e in events if isinstance(e, ModelRetry)]
    assert retry.attempt == 1 and "HTTP 503" in retry.reason


def test_interrupt_does_not_wait_for_running_tools(scripted_model):
    """Ctrl-C while a tool is still running ends the run at once instead of waiting for the tool."""
    release = threading.Event()
    still_running = threading.Event()

    @tool
    def slow(n: Annotated[int, "Unused."]) -> str:
        """Block until released."""
        still_running.set()
        release.wait(BARRIER_TIMEOUT_S * 6)
        return "finished"

    @tool
    def interrupt(n: Annotated[int, "Unused."]) -> str:
        """Press Ctrl-C once the slow tool runs."""
        still_running.wait(BARRIER_TIMEOUT_S)
        os.kill(os.getpid(), signal.SIGINT)
        return "sent"

    scripted_model.add(tool_calls(("slow", {"n": 1}), ("interrupt", {"n": 2})), answer("never asked"))
    try:
        with pytest.raises(KeyboardInterrupt):
            run(scripted_model, [slow, interrupt])
        assert not release.is_set()  # the slow tool was still blocked when run_agent gave up
    finally:
        release.set()
    assert len(scripted_model.requests) == 1


# -- fit_to_window on its own ---------------------------------------------------------------
def conversation(*tool_sizes: int) -> list[dict]:
    messages = [{"role": "system", "content": "s" * 400}, {"role": "user", "content": "q" * 400}]
    for n, size in enumerate(tool_sizes):
        messages.append({"role": "assistant", "content": None,
                         "tool_calls": [{"id": f"c{n}", "type": "function",
                                         "function": {"name": "read", "arguments": "{}"}}]})
        messages.append({"role": "tool", "tool_call_id": f"c{n}", "content": "x" * size})
    return messages


def test_conversation_within_budget_is_untouched():
    """Nothing is elided while the conversation fits."""
    messages = conversation(1_000, 1_000)
    assert fit_to_window(messages, 10_000, estimate_tokens) == (messages, 0)


def test_oldest_results_go_first_and_the_task_and_latest_turn_never():
    """Over budget, the oldest tool results are elided first; system, question and latest turn stay."""
    messages = conversation(8_000, 8_000, 8_000, 8_000)
    fitted, elided = fit_to_window(messages, 5_000, estimate_tokens)
    assert elided == 2
    contents = [m["content"] for m in fitted if m["role"] == "tool"]
    assert [c.startswith(ELIDED_PREFIX) for c in contents] == [True, True, False, False]
    assert "(8,000 chars)" in contents[0]
    assert fitted[:2] == messages[:2]
    assert [m["tool_call_id"] for m in fitted if m["role"] == "tool"] == ["c0", "c1", "c2", "c3"]
    assert messages[3]["content"] == "x" * 8_000  # the caller's list is not modified


def test_latest_turn_is_kept_even_when_nothing_else_helps():
    """If only the latest turn is too big, it is sent as is rather than dropped."""
    messages = conversation(50_000)
    assert fit_to_window(messages, 1_000, estimate_tokens) == (messages, 0)
