"""Checks of chat requests against the real ``openai`` and ``anthropic`` SDK types."""

from __future__ import annotations

import itertools
from typing import Any

from anthropic.types import MessageParam, TextBlockParam
from openai.types.chat import ChatCompletionMessageParam
from pydantic import TypeAdapter

OPENAI_MESSAGES = TypeAdapter(list[ChatCompletionMessageParam])
ANTHROPIC_MESSAGES = TypeAdapter(list[MessageParam])
ANTHROPIC_SYSTEM = TypeAdapter(list[TextBlockParam])


def _plain(value: Any) -> Any:
    """A validated value as plain data. Pydantic validates an ``Iterable`` field lazily
    (a ValidatorIterator): iterating it here is what runs the parts' validation."""
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return [_plain(item) for item in value]


def valid_openai(out: list[dict[str, Any]]) -> None:
    """``out`` validates as OpenAI's ``messages`` and has no key the types do not know
    (a TypedDict drops unknown keys, so the validated copy would differ)."""
    assert _plain(OPENAI_MESSAGES.validate_python(out)) == out


def valid_anthropic(out: dict[str, Any]) -> None:
    """``out`` holds ``messages`` (and ``system`` when there is one) and nothing else, each
    valid as Anthropic's request types with no unknown key; roles alternate, the first
    turn is not a system one, and a user turn's tool results lead it."""
    assert set(out) <= {"system", "messages"} and "messages" in out
    if "system" in out:
        assert out["system"] and _plain(ANTHROPIC_SYSTEM.validate_python(out["system"])) \
            == out["system"]
    assert _plain(ANTHROPIC_MESSAGES.validate_python(out["messages"])) == out["messages"]
    roles = [message["role"] for message in out["messages"]]
    assert set(roles) <= {"user", "assistant"}
    assert all(a != b for a, b in itertools.pairwise(roles)), roles
    for message in out["messages"]:
        if isinstance(message["content"], str):
            assert message["content"].strip()
            continue
        kinds = [block["type"] for block in message["content"]]
        assert kinds, message
        assert kinds == sorted(kinds, key=lambda kind: kind != "tool_result"), kinds
        for block in message["content"]:
            if block["type"] == "text":
                assert block["text"].strip()
