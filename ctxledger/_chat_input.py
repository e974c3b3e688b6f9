"""Chat messages in: a conversation (OpenAI's list, Anthropic's messages and ``system``)
as one batch of ``message.appended`` events, and errors that name the input message.

The shapes and the splitting are ``store.chat_shapes``'s; this module only makes the
events and says which input message a bad event came from, for ``Ledger.append_messages``
and ``ctxledger append-messages``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ctxledger.io._bounded import BoundedInputError, loads_bounded
from ctxledger.store.chat_shapes import ChatShapeError, canonical_conversation
from ctxledger.store.errors import EventValidationError
from ctxledger.store.log import EventCheck
from ctxledger.store.validate import coerce_new_event, validate_event

_PREFIX = "message.appended: "


@dataclass(frozen=True, slots=True)
class MessageBatch:
    """The events a conversation is, and the input message each came from."""

    events: list[dict[str, Any]]
    origins: list[int]
    """Per event, the index of its input message (-1: the ``system`` given apart)."""

    def where(self, index: int) -> str:
        """The input message event ``index`` came from: ``messages[2]``, ``system``, or
        ``messages[2] (message 2 of the 3 it splits into)``."""
        origin = self.origins[index]
        if origin < 0:
            return "system"
        pieces = self.origins.count(origin)
        if pieces == 1:
            return f"messages[{origin}]"
        nth = index - self.origins.index(origin) + 1
        return f"messages[{origin}] (message {nth} of the {pieces} it splits into)"

    def error(self, index: int, reason: str) -> EventValidationError:
        """The error of event ``index``, named by its input message."""
        reason = reason.removeprefix(_PREFIX).removeprefix("data: ")
        return EventValidationError(f"{self.where(index)}: {reason}")


def message_batch(messages: Sequence[Any], system: Any = None,
                  metadata: Mapping[str, Any] | None = None) -> MessageBatch:
    """The ``message.appended`` events of a conversation, in order (``metadata`` on each).

    Raises ``EventValidationError`` naming the first message of a shape that cannot be
    stored.
    """
    try:
        canonical, origins = canonical_conversation(messages, system)
    except ChatShapeError as exc:
        raise EventValidationError(str(exc)) from None
    extra = {"metadata": dict(metadata)} if metadata else {}
    events = [{"type": "message.appended", "data": message, **extra}
              for message in canonical]
    return MessageBatch(events, origins)


def check_batch(stream_id: str, batch: MessageBatch, max_event_bytes: int,
                check: EventCheck | None = None) -> None:
    """Validate every event of ``batch`` as ``append`` will (before any database is
    opened); raises ``EventValidationError`` naming the input message of the first bad
    one."""
    for index, raw in enumerate(batch.events):
        try:
            normalized, _, _ = validate_event(stream_id, coerce_new_event(raw),
                                              max_event_bytes)
            if check is not None:
                check(stream_id, normalized)
        except EventValidationError as exc:
            raise batch.error(index, str(exc)) from None


def parse_conversation(raw: bytes) -> tuple[list[Any], Any]:
    """``(messages, system)`` from JSON input: a list of messages (OpenAI's shape, or
    Anthropic's without a system prompt), or ``{"system": ..., "messages": [...]}``.

    Raises ``EventValidationError`` (one line) for input of neither form, or past the
    input limits (nesting, a number's range: ``ctxledger.io._bounded``).
    """
    try:
        value = loads_bounded(raw.decode("utf-8-sig"), "input")
    except UnicodeDecodeError as exc:
        raise EventValidationError(f"input is not valid UTF-8 (byte {exc.start + 1})") from None
    except BoundedInputError as exc:
        raise EventValidationError(str(exc)) from None
    except ValueError as exc:
        detail = (f"{exc.msg} (line {exc.lineno}, column {exc.colno})"
                  if isinstance(exc, json.JSONDecodeError) else str(exc))
        raise EventValidationError(f"invalid JSON: {detail}") from None
    if isinstance(value, list):
        return value, None
    if not isinstance(value, dict):
        raise EventValidationError("expected a list of messages or an object "
                                   '{"system", "messages"}')
    unknown = sorted(set(value) - {"system", "messages"})
    if unknown:
        raise EventValidationError(f"unknown key(s) {', '.join(map(repr, unknown))}: expected "
                                   'a list of messages or an object {"system", "messages"}')
    if "messages" not in value:
        raise EventValidationError('the object has no "messages"')
    messages = value["messages"]
    if not isinstance(messages, list):
        raise EventValidationError('"messages" must be a list of messages')
    return messages, value.get("system")
