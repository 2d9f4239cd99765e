"""Keeping the conversation inside the model's context window.

When the conversation outgrows its budget, the oldest tool results are
replaced by a short note telling the model what was dropped and that it can
call the tool again. The system prompt, the question and the latest turn are
never touched: the first two define the task, the last is what the model is
working on right now.

Token counts come from litellm's offline tiktoken counter, cached per string
(every message is counted once per run, not once per step); strings too big to
be worth tokenising use a chars/4 estimate, which over-counts code and prose
(measured 4.5-4.8 chars per token) and so errs on the safe side.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

CountTokens = Callable[[str], int]

CHARS_PER_TOKEN = 4
EXACT_COUNT_MAX_CHARS = 200_000  # tiktoken takes about 20 ms for this much
MESSAGE_OVERHEAD_TOKENS = 4  # role and separators, per message
ANSWER_RESERVE_TOKENS = 4_096  # room for the reply when max_output_tokens isn't configured
WINDOW_SAFETY_FRACTION = 0.9  # our tokenizer is not the provider's; keep 10 % spare
ELIDED_PREFIX = "[elided:"
ELISION_NOTE = (
    ELIDED_PREFIX + " this tool result ({chars:,} chars) was dropped to stay within the model's "
    "context window; call the tool again if you need it]"
)


def estimate_tokens(text: str) -> int:
    """A fast, conservative token estimate: about four characters per token."""
    return len(text) // CHARS_PER_TOKEN + 1


def token_counter(litellm_model: str) -> CountTokens:
    """A cached counter for `litellm_model`: litellm's tokenizer, or the estimate for huge strings."""
    from dispatcher.model import load_litellm

    litellm = load_litellm()
    cache: dict[str, int] = {}

    def count(text: str) -> int:
        if len(text) > EXACT_COUNT_MAX_CHARS:
            return estimate_tokens(text)
        if text not in cache:
            cache[text] = int(litellm.token_counter(model=litellm_model, text=text))
        return cache[text]

    return count


def input_budget(window_tokens: int, max_output_tokens: int | None = None, overhead_tokens: int = 0) -> int:
    """Tokens the messages may use: the window, less a safety margin, the reply and fixed overhead (tool schemas)."""
    reserve = max_output_tokens or min(ANSWER_RESERVE_TOKENS, window_tokens // 4)
    return int(window_tokens * WINDOW_SAFETY_FRACTION) - reserve - overhead_tokens


def message_tokens(message: dict[str, Any], count_tokens: CountTokens) -> int:
    """Tokens one chat message takes: its text, its tool calls and a fixed overhead."""
    total = MESSAGE_OVERHEAD_TOKENS
    content = message.get("content")
    if isinstance(content, str):
        total += count_tokens(content)
    elif isinstance(content, list):  # multi-part content: count the text parts
        total += sum(count_tokens(part.get("text", "")) for part in content if isinstance(part, dict))
    for call in message.get("tool_calls") or ():
        function = call.get("function") or {}
        total += count_tokens(function.get("name") or "") + count_tokens(function.get("arguments") or "")
    return total


def fit_to_window(
    messages: list[dict[str, Any]], budget_tokens: int, count_tokens: CountTokens
) -> tuple[list[dict[str, Any]], int]:
    """Elide the oldest tool results until the conversation fits; return (messages, how many were elided).

    The input list is not modified. If eliding every tool result but the
    latest turn's is not enough, the result is still over budget: the
    provider will say so, which beats silently dropping the question.
    """
    sizes = [message_tokens(message, count_tokens) for message in messages]
    total = sum(sizes)
    if total <= budget_tokens:
        return messages, 0
    fitted = list(messages)
    elided = 0
    for index in _elidable(messages):
        if total <= budget_tokens:
            break
        content = messages[index].get("content") or ""
        note = {**messages[index], "content": ELISION_NOTE.format(chars=len(content))}
        new_size = message_tokens(note, count_tokens)
        if new_size >= sizes[index]:
            continue  # already tiny: eliding would not help
        fitted[index] = note
        total += new_size - sizes[index]
        elided += 1
    return fitted, elided


def _elidable(messages: list[dict[str, Any]]) -> list[int]:
    """Indexes of tool results we may drop, oldest first."""
    first_user = next((i for i, m in enumerate(messages) if m.get("role") == "user"), -1)
    last_assistant = max((i for i, m in enumerate(messages) if m.get("role") == "assistant"), default=len(messages))
    return [
        index
        for index, message in enumerate(messages[:last_assistant])
        if message.get("role") == "tool"
        and index != first_user
        and not str(message.get("content") or "").startswith(ELIDED_PREFIX)
    ]
