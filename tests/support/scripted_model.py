"""A scripted OpenAI-compatible chat-completions server on 127.0.0.1.

No model API is reachable from the tests, so every end-to-end test points
litellm's real code path (through `api_base`) at this server. It replays a
script — a list of turns, one consumed per request — and records every
request body so tests can assert what the model was sent:

    server = ScriptedModelServer([
        tool_calls(("grep", {"pattern": "def main"})),
        error(429, retry_after=1),
        answer("main is defined in cli.py:12"),
    ])

A turn is a plain JSON-able dict, so the same script can be a JSON file:
`python -m tests.support.scripted_model --script script.json --port-file F`.
When the script runs out the server answers HTTP 500 with a body saying so,
so a test that makes one call too many fails loudly.
"""

from __future__ import annotations

import argparse
import http.server
import json
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import tomli_w

SCRIPTED_MODEL_ALIAS = "scripted"
SCRIPTED_LITELLM_MODEL = "openai/scripted-model"
FAKE_API_KEY = "sk-test-not-a-real-key"
DEFAULT_CONTEXT_WINDOW = 100_000
# Usage every reply reports unless the turn overrides it, so tests can sum it.
DEFAULT_PROMPT_TOKENS = 100
DEFAULT_COMPLETION_TOKENS = 20
# Streamed text and tool arguments are cut into pieces this long, so the
# client really has to reassemble them.
STREAM_PIECE_CHARS = 7
SHUTDOWN_POLL_S = 0.02  # how often serve_forever checks for shutdown; the default 0.5 s slows every test

Turn = dict[str, Any]


# -- turn builders ------------------------------------------------------------
def tool_calls(*calls: tuple[str, dict | str], content: str | None = None,
               usage: tuple[int, int] | None = None) -> Turn:
    """An assistant turn calling tools: `("name", {args})`, or `("name", "raw text")` for malformed JSON."""
    entries = [
        {"name": name, "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments)}
        for name, arguments in calls
    ]
    return {"type": "tool_calls", "calls": entries, "content": content, "usage": _usage(usage)}


def answer(text: str, usage: tuple[int, int] | None = None) -> Turn:
    """A final assistant answer with no tool calls."""
    return {"type": "answer", "content": text, "usage": _usage(usage)}


def error(status: int, retry_after: float | None = None, body: str | dict | None = None) -> Turn:
    """An HTTP error reply (429, 500, 401...), optionally with a Retry-After header."""
    return {"type": "error", "status": status, "retry_after": retry_after, "body": body}


def delay(seconds: float, then: Turn) -> Turn:
    """Wait `seconds` before replying with `then` (for client timeout tests)."""
    return {"type": "delay", "seconds": seconds, "then": then}


def _normalised(turn: Turn) -> Turn:
    """Fill what a hand-written JSON turn may leave out (usage, dict arguments)."""
    turn = dict(turn)
    if turn["type"] == "delay":
        turn["then"] = _normalised(turn["then"])
    if turn["type"] in ("answer", "tool_calls"):
        turn.setdefault("usage", _usage(None))
        turn.setdefault("content", None)
    if turn["type"] == "tool_calls":
        turn["calls"] = [{"name": call["name"], "arguments": call["arguments"] if isinstance(call["arguments"], str)
                          else json.dumps(call["arguments"])} for call in turn["calls"]]
    return turn


def _usage(usage: tuple[int, int] | None) -> dict[str, int]:
    prompt, completion = usage or (DEFAULT_PROMPT_TOKENS, DEFAULT_COMPLETION_TOKENS)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


# -- the server -----------------------------------------------------------------
class ScriptedModelServer:
    """Serve `script` on 127.0.0.1; `requests` holds every request body received."""

    def __init__(self, script: list[Turn] | None = None, port: int = 0) -> None:
        self.script: list[Turn] = [_normalised(turn) for turn in script or []]
        self.requests: list[dict[str, Any]] = []
        self.request_headers: list[dict[str, str]] = []
        # Called as each request arrives, before it is answered: a test's probe
        # of the world at that moment (which containers run, say).
        self.on_request: Callable[[], None] | None = None
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._httpd = _Server(("127.0.0.1", port), _Handler)
        self._httpd.owner = self
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return self._httpd.server_address[1]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def add(self, *turns: Turn) -> None:
        """Append turns to the script (thread-safe)."""
        with self._lock:
            self.script.extend(_normalised(turn) for turn in turns)

    def start(self) -> "ScriptedModelServer":
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(SHUTDOWN_POLL_S,),
                                        name="scripted-model", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()  # wakes any `delay` turn still waiting
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join()

    def __enter__(self) -> "ScriptedModelServer":
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def messages(self, request_index: int = -1) -> list[dict[str, Any]]:
        """The messages of one recorded request (the last by default)."""
        return self.requests[request_index]["messages"]

    def everything_sent(self) -> str:
        """Every recorded request body as one string, for "never sent" assertions."""
        return "\n".join(json.dumps(body, ensure_ascii=False) for body in self.requests)

    def _next_turn(self, body: dict[str, Any], headers: dict[str, str]) -> tuple[int, Turn | None]:
        if self.on_request is not None:
            self.on_request()
        with self._lock:
            self.requests.append(body)
            self.request_headers.append(headers)
            index = len(self.requests) - 1
            return index, (self.script.pop(0) if self.script else None)


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    owner: ScriptedModelServer


class _Handler(http.server.BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"
    # A reply goes out in several small writes; with Nagle's algorithm on, the
    # client's delayed ACK held each keep-alive reply back by about 40 ms.
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (http.server's signature)
        """Keep test output quiet."""

    def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
        path = self.path.split("?", 1)[0].rstrip("/")
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        if path not in ("/v1/chat/completions", "/chat/completions"):
            self._json(404, {"error": {"message": f"scripted model: no route {path}", "type": "not_found"}})
            return
        try:
            body = json.loads(raw or b"{}")
        except json.JSONDecodeError:
            self._json(400, {"error": {"message": "scripted model: request body is not JSON", "type": "bad_request"}})
            return
        owner = self.server.owner
        index, turn = owner._next_turn(body, {k.lower(): v for k, v in self.headers.items()})
        while turn is not None and turn["type"] == "delay":
            if owner._stopping.wait(turn["seconds"]):
                return
            turn = turn["then"]
        if turn is None:
            message = f"scripted model: script exhausted at request {index + 1}; the test made one call too many"
            self._json(500, {"error": {"message": message, "type": "script_exhausted"}})
        elif turn["type"] == "error":
            self._error(turn)
        elif body.get("stream"):
            self._stream(index, turn, body)
        else:
            self._json(200, _completion(index, turn, body))

    def _error(self, turn: Turn) -> None:
        status, payload = turn["status"], turn.get("body")
        if payload is None:
            payload = {"error": {"message": f"scripted error {status}", "type": "scripted_error", "code": status}}
        elif isinstance(payload, str):
            payload = {"error": {"message": payload, "type": "scripted_error", "code": status}}
        extra = {} if turn.get("retry_after") is None else {"Retry-After": _header_number(turn["retry_after"])}
        self._json(status, payload, extra)

    def _json(self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def _stream(self, index: int, turn: Turn, body: dict[str, Any]) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        for chunk in _stream_chunks(index, turn, body, include_usage):
            self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
            self.wfile.flush()
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()


def _header_number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def _call_id(index: int, position: int) -> str:
    return f"call_{index + 1}_{position + 1}"


def _envelope(index: int, body: dict[str, Any], obj: str) -> dict[str, Any]:
    return {"id": f"chatcmpl-scripted-{index + 1}", "object": obj, "created": int(time.time()),
            "model": body.get("model", SCRIPTED_LITELLM_MODEL)}


def _completion(index: int, turn: Turn, body: dict[str, Any]) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": turn.get("content")}
    finish = "stop"
    if turn["type"] == "tool_calls":
        message["tool_calls"] = [
            {"id": _call_id(index, n), "type": "function",
             "function": {"name": call["name"], "arguments": call["arguments"]}}
            for n, call in enumerate(turn["calls"])
        ]
        finish = "tool_calls"
    return {**_envelope(index, body, "chat.completion"),
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": turn["usage"]}


def _pieces(text: str) -> list[str]:
    return [text[i:i + STREAM_PIECE_CHARS] for i in range(0, len(text), STREAM_PIECE_CHARS)] or [""]


def _stream_chunks(index: int, turn: Turn, body: dict[str, Any], include_usage: bool) -> Iterator[dict[str, Any]]:
    envelope = _envelope(index, body, "chat.completion.chunk")

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**envelope, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    yield chunk({"role": "assistant", "content": ""})
    for piece in _pieces(turn["content"]) if turn.get("content") else []:
        yield chunk({"content": piece})
    if turn["type"] == "tool_calls":
        for n, call in enumerate(turn["calls"]):
            yield chunk({"tool_calls": [{"index": n, "id": _call_id(index, n), "type": "function",
                                         "function": {"name": call["name"], "arguments": ""}}]})
            for piece in _pieces(call["arguments"]):
                yield chunk({"tool_calls": [{"index": n, "function": {"arguments": piece}}]})
        yield chunk({}, "tool_calls")
    else:
        yield chunk({}, "stop")
    if include_usage:
        yield {**envelope, "choices": [], "usage": turn["usage"]}


# -- pytest fixture and config helper -----------------------------------------------
@pytest.fixture
def scripted_model() -> Iterator[ScriptedModelServer]:
    """A running ScriptedModelServer with an empty script; tests `add()` their turns."""
    with ScriptedModelServer() as server:
        yield server


def scripted_spec(server: ScriptedModelServer, **overrides: Any):
    """The ModelSpec the config written by `write_model_config` resolves to, for in-process tests."""
    from config.models import ModelSpec

    settings = {"name": SCRIPTED_MODEL_ALIAS, "litellm_model": SCRIPTED_LITELLM_MODEL, "api_base": server.base_url,
                "api_key": FAKE_API_KEY, "context_window": DEFAULT_CONTEXT_WINDOW, **overrides}
    return ModelSpec(**settings)


def write_model_config(path: Path, server: ScriptedModelServer, *, defaults: dict[str, Any] | None = None,
                       **model_settings: Any) -> Path:
    """Write a research config whose default model is the scripted server; returns `path`.

    `model_settings` go into `[models.scripted]` (e.g. stream=True, context_window=2000);
    `defaults` adds keys to `[defaults]` (e.g. {"max_steps": 3}).
    """
    alias = {"model": SCRIPTED_LITELLM_MODEL, "api_base": server.base_url, "api_key": FAKE_API_KEY,
             "context_window": DEFAULT_CONTEXT_WINDOW, **model_settings}
    document = {"defaults": {"model": SCRIPTED_MODEL_ALIAS, **(defaults or {})},
                "models": {SCRIPTED_MODEL_ALIAS: alias}}
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(tomli_w.dumps(document), encoding="utf-8")
    return path


# -- python -m tests.support.scripted_model ------------------------------------------
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Serve a scripted OpenAI-compatible model on 127.0.0.1.")
    parser.add_argument("--script", required=True, type=Path, help="JSON file: a list of turns")
    parser.add_argument("--port", type=int, default=0, help="port to listen on (default: any free port)")
    parser.add_argument("--port-file", type=Path, help="write the chosen port here once listening")
    args = parser.parse_args(argv)
    server = ScriptedModelServer(json.loads(args.script.read_text(encoding="utf-8")), port=args.port)
    finished = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: finished.set())
    with server:
        if args.port_file:
            # Write then rename, so a reader polling for the file never sees it half-written.
            partial = args.port_file.with_name(args.port_file.name + ".partial")
            partial.write_text(str(server.port), encoding="utf-8")
            partial.replace(args.port_file)
        print(f"scripted model listening on {server.base_url}", flush=True)
        try:
            finished.wait()
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
