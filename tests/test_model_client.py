"""ModelClient against a scripted OpenAI-compatible server, through litellm's real code path."""

from __future__ import annotations

import socket

import pytest

from dispatcher.errors import ModelError
from dispatcher.model import ModelClient, context_window, warm_up
from tests.support.scripted_model import (
    DEFAULT_COMPLETION_TOKENS,
    DEFAULT_PROMPT_TOKENS,
    FAKE_API_KEY,
    answer,
    delay,
    error,
    scripted_model,  # noqa: F401
    scripted_spec,
    tool_calls,
)

FAST_BACKOFF_S = 0.01
QUESTION = [{"role": "system", "content": "You answer."}, {"role": "user", "content": "What is up?"}]
GREP_SCHEMA = {
    "type": "function",
    "function": {"name": "grep", "description": "Search files.",
                 "parameters": {"type": "object", "properties": {"pattern": {"type": "string"}}}},
}


def client_for(server, retries: list | None = None, **spec_overrides) -> ModelClient:
    on_retry = (lambda *args: retries.append(args)) if retries is not None else None
    return ModelClient(scripted_spec(server, **spec_overrides), backoff_base_s=FAST_BACKOFF_S, on_retry=on_retry)


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_answer_and_usage_come_back(scripted_model, stream):
    """A plain answer arrives with the token usage the server reported, streamed or not."""
    scripted_model.add(answer("Everything is fine, and this sentence is long enough to stream in pieces.",
                              usage=(1234, 56)))
    turn = client_for(scripted_model, stream=stream).complete(QUESTION, [GREP_SCHEMA])
    assert turn.content == "Everything is fine, and this sentence is long enough to stream in pieces."
    assert turn.tool_calls == ()
    assert (turn.prompt_tokens, turn.completion_tokens) == (1234, 56)
    assert turn.cost_usd == 0.0  # an unpriced model costs nothing rather than failing


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_several_tool_calls_come_back_intact(scripted_model, stream):
    """Every tool call of a turn arrives with its id, name and raw arguments, even malformed ones."""
    scripted_model.add(tool_calls(("grep", {"pattern": "def main", "path": "src/app.py"}),
                                  ("read", '{"path": "a.py", oops'),
                                  ("no_such_tool", {})))
    turn = client_for(scripted_model, stream=stream).complete(QUESTION, [GREP_SCHEMA])
    assert [(c.name, c.arguments) for c in turn.tool_calls] == [
        ("grep", '{"pattern": "def main", "path": "src/app.py"}'),
        ("read", '{"path": "a.py", oops'),
        ("no_such_tool", "{}"),
    ]
    assert len({c.id for c in turn.tool_calls}) == 3
    assert turn.content is None
    assert (turn.prompt_tokens, turn.completion_tokens) == (DEFAULT_PROMPT_TOKENS, DEFAULT_COMPLETION_TOKENS)


def test_request_carries_messages_tools_key_and_settings(scripted_model):
    """The endpoint receives our messages, the tool schemas, the key, extra headers and the output cap."""
    scripted_model.add(answer("ok"))
    client = client_for(scripted_model, stream=True, max_output_tokens=321, extra_headers={"X-Team": "research"})
    client.complete(QUESTION, [GREP_SCHEMA])
    (body,), (headers,) = scripted_model.requests, scripted_model.request_headers
    assert body["messages"] == QUESTION
    assert body["tools"] == [GREP_SCHEMA]
    assert body["max_tokens"] == 321
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert headers["authorization"] == f"Bearer {FAKE_API_KEY}"
    assert headers["x-team"] == "research"


def test_no_tools_means_no_tools_field(scripted_model):
    """A call without tools sends no `tools` field at all (the step-limit call relies on it)."""
    scripted_model.add(answer("ok"))
    client_for(scripted_model).complete(QUESTION, None)
    assert "tools" not in scripted_model.requests[0]


def test_rate_limit_is_retried_after_the_servers_retry_after(scripted_model):
    """A 429 with Retry-After: 1 is retried after exactly the second the server asked for."""
    scripted_model.add(error(429, retry_after=1), answer("after the wait"))
    retries: list = []
    turn = client_for(scripted_model, retries).complete(QUESTION)
    assert turn.content == "after the wait"
    assert len(retries) == 1
    attempt, delay_s, reason = retries[0]
    assert (attempt, delay_s) == (1, 1.0)
    assert "HTTP 429" in reason
    assert len(scripted_model.requests) == 2


def test_server_error_is_retried_then_succeeds(scripted_model):
    """Two 500s, then an answer: the caller gets the answer and hears about both retries."""
    scripted_model.add(error(500, body="upstream overloaded"), error(503), answer("recovered"))
    retries: list = []
    turn = client_for(scripted_model, retries).complete(QUESTION)
    assert turn.content == "recovered"
    assert [attempt for attempt, _, _ in retries] == [1, 2]
    assert "HTTP 500" in retries[0][2] and "upstream overloaded" in retries[0][2]
    assert len(scripted_model.requests) == 3


def test_persistent_server_error_fails_with_one_sentence(scripted_model, capfd):
    """After the last attempt the error is one sentence naming the model, the status and the endpoint."""
    scripted_model.add(*[error(500, body="upstream overloaded")] * 5)
    with pytest.raises(ModelError) as caught:
        client_for(scripted_model).complete(QUESTION)
    message = str(caught.value)
    assert message == (f"model 'scripted' failed after 5 attempts: HTTP 500 from {scripted_model.base_url} "
                       "(upstream overloaded)")
    assert "\n" not in message
    assert len(scripted_model.requests) == 5  # litellm's and the SDK's own retries are off
    assert capfd.readouterr().out == ""  # litellm's help banners never reach stdout


@pytest.mark.parametrize("status", [401, 403])
def test_rejected_key_is_not_retried(scripted_model, status):
    """A rejected key fails at once, telling the user where the key is configured."""
    scripted_model.add(error(status), answer("never reached"))
    retries: list = []
    with pytest.raises(ModelError) as caught:
        client_for(scripted_model, retries).complete(QUESTION)
    assert str(caught.value) == (f"model 'scripted' rejected the API key (HTTP {status}); "
                                 "check [models.scripted] api_key")
    assert retries == [] and len(scripted_model.requests) == 1


def test_bad_request_is_not_retried(scripted_model):
    """A 400 is the request's fault: no retry, and the server's reason is in the message."""
    scripted_model.add(error(400, body="messages: unexpected role"), answer("never reached"))
    with pytest.raises(ModelError, match=r"refused the request: HTTP 400 .*\(messages: unexpected role\)"):
        client_for(scripted_model).complete(QUESTION)
    assert len(scripted_model.requests) == 1


def test_unknown_model_is_not_retried(scripted_model):
    """A 404 (a wrong model name) fails at once and says to check the name."""
    scripted_model.add(error(404, body="no such model"), answer("never reached"))
    with pytest.raises(ModelError, match="was not found: HTTP 404 .*check the model name"):
        client_for(scripted_model).complete(QUESTION)
    assert len(scripted_model.requests) == 1


def test_slow_response_times_out_and_is_retried(scripted_model):
    """A server that does not answer within the timeout is retried, and the retry succeeds."""
    scripted_model.add(delay(30, then=answer("too late")), answer("in time"))
    retries: list = []
    # Long enough for the retry's answer to arrive on a loaded machine.
    client = ModelClient(scripted_spec(scripted_model), timeout_s=2, backoff_base_s=FAST_BACKOFF_S,
                         on_retry=lambda *args: retries.append(args))
    assert client.complete(QUESTION).content == "in time"
    assert "no response from" in retries[0][2] and "2 s" in retries[0][2]


def test_unreachable_endpoint_fails_with_one_sentence():
    """Nothing listening on the endpoint: retried, then one sentence saying we could not connect."""
    with socket.socket() as probe:  # a port that was free a moment ago and has no listener now
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    from config.models import ModelSpec

    spec = ModelSpec(name="local", litellm_model="openai/local", api_base=f"http://127.0.0.1:{port}/v1", api_key="k")
    retries: list = []
    client = ModelClient(spec, max_retries=2, backoff_base_s=FAST_BACKOFF_S, on_retry=lambda *a: retries.append(a))
    with pytest.raises(ModelError) as caught:
        client.complete(QUESTION)
    endpoint = f"http://127.0.0.1:{port}/v1"
    assert str(caught.value) == f"model 'local' failed after 3 attempts: could not connect to {endpoint}"
    assert len(retries) == 2


def test_exhausted_script_fails_loudly(scripted_model):
    """A test that makes one call too many gets an error that says so (the scripted server's own contract)."""
    with pytest.raises(ModelError, match="script exhausted"):
        ModelClient(scripted_spec(scripted_model), max_retries=0).complete(QUESTION)


def test_context_window_comes_from_config_then_litellm_then_default(scripted_model):
    """The configured window wins; a known model uses litellm's map; an unknown one gets 128k."""
    from config.models import ModelSpec

    assert context_window(scripted_spec(scripted_model, context_window=4321)) == 4321
    assert context_window(ModelSpec(name="gpt", litellm_model="openai/gpt-4o")) == 128_000
    assert context_window(ModelSpec(name="claude", litellm_model="anthropic/claude-sonnet-4-5")) == 200_000
    assert context_window(ModelSpec(name="x", litellm_model="openai/made-up-model")) == 128_000


def test_warm_up_then_call_works(scripted_model):
    """Warming up (importing litellm in the background) never gets in the way of the first call."""
    warm_up()
    warm_up()
    scripted_model.add(answer("warm"))
    assert client_for(scripted_model).complete(QUESTION).content == "warm"
