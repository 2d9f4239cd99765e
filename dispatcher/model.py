"""One model call over litellm, with our own retries; litellm's errors become ModelError here.

litellm takes seconds to import, so it is imported lazily: `warm_up()` starts
the import in a background thread while the workspace is being prepared, and
the first call waits for it. Everything litellm raises is translated into one
sentence naming the model, the endpoint and what went wrong, right where it
enters our code (`_call_failure`).
"""

from __future__ import annotations

import email.utils
import json
import os
import random
import threading
import time
from collections.abc import Callable
from typing import Any

import attrs

from config.models import ModelSpec
from dispatcher.errors import ModelError

# litellm must never fetch its cost map from the network when it is imported.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

DEFAULT_MAX_RETRIES = 4
DEFAULT_TIMEOUT_S = 300.0  # one call; long answers from slow models can take minutes
DEFAULT_BACKOFF_BASE_S = 1.0  # first retry waits about this long, then doubles
MAX_BACKOFF_S = 30.0
MAX_RETRY_AFTER_S = 60.0  # a server asking for longer gets retried sooner; the last attempt still fails cleanly
BACKOFF_JITTER = 0.25  # ±25 %, so parallel runs don't retry in lockstep
DEFAULT_CONTEXT_WINDOW = 128_000
MAX_DETAIL_CHARS = 200
RETRYABLE_STATUSES = frozenset({408, 409, 425, 429})  # plus every 5xx

OnRetry = Callable[[int, float, str], None]  # (attempt number, delay in seconds, reason)

_import_lock = threading.Lock()
_warm_thread: threading.Thread | None = None
_litellm: Any = None  # the configured module, once imported


def warm_up() -> None:
    """Start importing litellm in a daemon thread, so it overlaps with slow preparation."""
    global _warm_thread
    with _import_lock:
        if _warm_thread is None:
            _warm_thread = threading.Thread(target=_import_litellm, name="litellm-import", daemon=True)
            _warm_thread.start()


def load_litellm():
    """The litellm module, configured to stay quiet and offline; waits for `warm_up` if it ran."""
    with _import_lock:
        thread = _warm_thread
    if thread is not None:
        thread.join()
    return _import_litellm()


def _import_litellm():
    global _litellm
    if _litellm is None:
        import warnings

        import litellm

        litellm.suppress_debug_info = True  # it prints "Give Feedback / Get Help" banners on every error
        litellm.telemetry = False
        # Token counting would otherwise download HuggingFace tokenizers for some models.
        litellm.disable_hf_tokenizer_download = True
        # pydantic warns about litellm's own types on the first streamed call: noise on the user's stderr.
        warnings.filterwarnings("ignore", category=UserWarning, module=r"pydantic\.")
        _litellm = litellm
    return _litellm


@attrs.frozen
class ToolCall:
    id: str
    name: str
    arguments: str  # raw JSON text, exactly as the model wrote it


@attrs.frozen
class ModelTurn:
    content: str | None
    tool_calls: tuple[ToolCall, ...] = ()
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0

    def as_message(self) -> dict[str, Any]:
        """This turn as the assistant message to append to the conversation."""
        message: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.tool_calls:
            message["tool_calls"] = [
                {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}
                for call in self.tool_calls
            ]
        return message


def context_window(spec: ModelSpec) -> int:
    """Tokens the model accepts: the configured value, else litellm's model map, else a safe default."""
    if spec.context_window:
        return spec.context_window
    litellm = load_litellm()
    try:
        info = litellm.get_model_info(spec.litellm_model)
    except Exception:  # litellm raises several types for a model it has no map entry for
        return DEFAULT_CONTEXT_WINDOW
    return info.get("max_input_tokens") or DEFAULT_CONTEXT_WINDOW


class ModelClient:
    """Calls one model; `complete()` retries transient failures and raises ModelError otherwise."""

    def __init__(
        self,
        spec: ModelSpec,
        *,
        max_retries: int = DEFAULT_MAX_RETRIES,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        backoff_base_s: float = DEFAULT_BACKOFF_BASE_S,
        on_retry: OnRetry | None = None,
    ) -> None:
        self.spec = spec
        self.max_retries = max_retries
        self.timeout_s = timeout_s
        self.backoff_base_s = backoff_base_s
        self.on_retry = on_retry

    def complete(self, messages: list[dict], tools: list[dict] | None = None, *,
                 on_retry: OnRetry | None = None) -> ModelTurn:
        """One model turn. `on_retry` (else the client's) hears about every retry before its wait."""
        report = on_retry or self.on_retry
        attempts = self.max_retries + 1
        for attempt in range(1, attempts + 1):
            try:
                return self._call_once(messages, tools)
            except _Failure as failure:
                if not failure.retryable:
                    raise ModelError(failure.sentence(self.spec)) from failure.__cause__
                if attempt == attempts:
                    raise ModelError(
                        f"model {self.spec.name!r} failed after {attempts} attempt{'s' * (attempts > 1)}: "
                        f"{failure.reason}"
                    ) from failure.__cause__
                delay_s = failure.retry_after_s if failure.retry_after_s is not None else self._backoff(attempt)
                if report is not None:
                    report(attempt, delay_s, failure.reason)
                time.sleep(delay_s)
        raise AssertionError("unreachable: the loop returns or raises")

    def _backoff(self, attempt: int) -> float:
        delay = min(MAX_BACKOFF_S, self.backoff_base_s * 2 ** (attempt - 1))
        return delay * random.uniform(1 - BACKOFF_JITTER, 1 + BACKOFF_JITTER)

    def _call_once(self, messages: list[dict], tools: list[dict] | None) -> ModelTurn:
        litellm = load_litellm()
        spec = self.spec
        options: dict[str, Any] = {
            "model": spec.litellm_model,
            "messages": messages,
            "api_base": spec.api_base,
            "api_key": spec.api_key,
            "timeout": self.timeout_s,
            "num_retries": 0,  # our retries are the only ones: litellm's and the SDK's would multiply them
            "max_retries": 0,
            "drop_params": True,  # a provider that lacks e.g. stream_options ignores it instead of failing
        }
        if spec.extra_headers:
            options["extra_headers"] = dict(spec.extra_headers)
        if spec.max_output_tokens:
            options["max_tokens"] = spec.max_output_tokens
        if tools:
            options["tools"] = tools
        if spec.stream:
            options["stream"] = True
            options["stream_options"] = {"include_usage": True}
        try:
            response = litellm.completion(**options)
            if spec.stream:
                chunks = list(response)
                response = litellm.stream_chunk_builder(chunks, messages=messages)
                if response is None:
                    raise _Failure("the streamed response was empty", retryable=True)
        except _Failure:
            raise
        except Exception as exc:  # litellm raises openai, httpx and its own types; all end here
            raise _call_failure(exc, spec, self.timeout_s) from exc
        return _turn(response, litellm, spec)


def _turn(response: Any, litellm: Any, spec: ModelSpec) -> ModelTurn:
    choices = getattr(response, "choices", None) or []
    if not choices:
        raise _Failure("the response had no choices", retryable=True)
    message = choices[0].message
    calls = tuple(
        ToolCall(
            id=call.id or f"call_{n}",
            name=(call.function.name or "") if call.function else "",
            arguments=(call.function.arguments or "") if call.function else "",
        )
        for n, call in enumerate(getattr(message, "tool_calls", None) or [], start=1)
    )
    usage = getattr(response, "usage", None)
    return ModelTurn(
        # Streams assemble an empty string beside tool calls; providers expect null there.
        content=(message.content or None) if calls else message.content,
        tool_calls=calls,
        prompt_tokens=int(getattr(usage, "prompt_tokens", 0) or 0),
        completion_tokens=int(getattr(usage, "completion_tokens", 0) or 0),
        cost_usd=_cost(response, litellm, spec),
    )


def _cost(response: Any, litellm: Any, spec: ModelSpec) -> float:
    try:
        return float(litellm.completion_cost(completion_response=response, model=spec.litellm_model) or 0.0)
    except Exception:  # an unpriced model (a local server, a proxy alias) costs nothing we can know
        return 0.0


class _Failure(Exception):
    """One failed attempt, already classified; never leaves this module."""

    def __init__(self, reason: str, *, retryable: bool, status: int | None = None,
                 retry_after_s: float | None = None, kind: str = "other") -> None:
        super().__init__(reason)
        self.reason = reason
        self.retryable = retryable
        self.status = status
        self.retry_after_s = retry_after_s
        self.kind = kind

    def sentence(self, spec: ModelSpec) -> str:
        """The one sentence for a failure we do not retry."""
        if self.kind == "auth":
            where = f"[models.{spec.name}] api_key" if _is_alias(spec.name) else "the provider's API key"
            return f"model {spec.name!r} rejected the API key (HTTP {self.status}); check {where}"
        if self.kind == "context":
            return (f"model {spec.name!r} refused the conversation as longer than its context window; "
                    f"set context_window in [models] lower ({self.reason})")
        if self.kind == "not_found":
            return f"model {spec.name!r} was not found: {self.reason}; check the model name and api_base"
        return f"model {spec.name!r} refused the request: {self.reason}"


def _call_failure(exc: BaseException, spec: ModelSpec, timeout_s: float) -> _Failure:
    """Classify what litellm raised: is it worth retrying, and how do we say it?"""
    endpoint = spec.api_base or spec.litellm_model.split("/", 1)[0]
    chain = _chain(exc)
    names = {type(e).__name__ for e in chain}
    if names & {"Timeout", "APITimeoutError", "TimeoutException", "ReadTimeout", "ConnectTimeout",
                "WriteTimeout", "PoolTimeout", "TimeoutError"}:
        return _Failure(f"no response from {endpoint} within {timeout_s:g} s", retryable=True, kind="timeout")
    if names & {"ConnectError", "ConnectionRefusedError", "RemoteProtocolError", "ConnectionResetError"} \
            or type(exc).__name__ == "APIConnectionError":
        return _Failure(f"could not connect to {endpoint}", retryable=True, kind="connection")
    http_error = next((e for e in chain if type(e).__name__ == "HTTPStatusError"), None)
    response = getattr(http_error, "response", None)
    status = getattr(response, "status_code", None) or getattr(exc, "status_code", None)
    if not isinstance(status, int):
        return _Failure(f"{type(exc).__name__} from {endpoint} ({_detail(exc, None)})", retryable=False)
    reason = f"HTTP {status} from {endpoint} ({_detail(exc, response)})"
    headers = getattr(exc, "litellm_response_headers", None) or getattr(response, "headers", None) or {}
    retryable = status in RETRYABLE_STATUSES or status >= 500
    kind = {401: "auth", 403: "auth", 404: "not_found"}.get(status, "other")
    if type(exc).__name__ == "ContextWindowExceededError":
        kind, retryable = "context", False
    return _Failure(reason, retryable=retryable, status=status, retry_after_s=_retry_after_s(headers), kind=kind)


def _chain(exc: BaseException) -> list[BaseException]:
    chain: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in chain:
        chain.append(current)
        current = current.__cause__ or current.__context__
    return chain


def _detail(exc: BaseException, response: Any) -> str:
    """The upstream's own error message, without litellm's class-name prefixes."""
    text = ""
    body = getattr(exc, "body", None)
    if isinstance(body, dict) and isinstance(body.get("message"), str):
        text = body["message"]
    elif response is not None:
        text = _message_in(response)
    if not text:
        text = str(getattr(exc, "message", None) or exc)
        marker = "Exception - "
        text = text.split(marker, 1)[1] if marker in text else text.split(": ")[-1]
    text = " ".join(text.split())
    return text if len(text) <= MAX_DETAIL_CHARS else text[: MAX_DETAIL_CHARS - 1] + "…"


def _message_in(response: Any) -> str:
    try:
        payload = json.loads(response.text)
    except (ValueError, AttributeError, RuntimeError):  # RuntimeError: a streamed body never read
        return ""
    error = payload.get("error") if isinstance(payload, dict) else None
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return error["message"]
    return error if isinstance(error, str) else ""


def _retry_after_s(headers: Any) -> float | None:
    """Seconds the server asked us to wait (retry-after-ms, or Retry-After seconds or date), capped."""
    lowered = {str(k).lower(): str(v) for k, v in dict(headers).items()}
    seconds: float | None = None
    try:
        if "retry-after-ms" in lowered:
            seconds = float(lowered["retry-after-ms"]) / 1000
        elif "retry-after" in lowered:
            value = lowered["retry-after"].strip()
            try:
                seconds = float(value)
            except ValueError:
                moment = email.utils.parsedate_to_datetime(value)
                seconds = moment.timestamp() - time.time()
    except (ValueError, TypeError):
        return None
    if seconds is None:
        return None
    return min(max(seconds, 0.0), MAX_RETRY_AFTER_S)


def _is_alias(name: str) -> bool:
    """A [models] alias, as opposed to a provider/model or provider:model string."""
    return "/" not in name and ":" not in name
