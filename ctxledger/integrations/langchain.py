"""A LangChain chat message history kept in a ledger (extra ``langchain``).

``LedgerChatMessageHistory(ledger, session_id)`` is a ``BaseChatMessageHistory``: each
message is a ``message.appended`` in the canonical chat form (``store.chat``):

- ``HumanMessage`` is a user message, ``SystemMessage`` a system one, ``AIMessage`` an
  assistant one (its ``tool_calls`` the canonical calls, ``args`` as the JSON text of
  ``arguments``), ``ToolMessage`` a tool message (``tool_call_id``; ``status="error"``
  is ``is_error``), ``ChatMessage`` the message of its role;
- the message's ``id`` is its ``message_id`` (appending an id again replaces the older
  message, as LangGraph's ``add_messages`` does), its ``name`` the speaker's name;
- what the canonical form has no field for (``additional_kwargs``,
  ``response_metadata``, ``usage_metadata``, a ``ToolMessage``'s ``artifact``, content
  blocks in another shape) rides in the event's ``metadata.extra``, so every message
  reads back equal to the one added.

``clear`` retracts every message (one batch): the log keeps them for replay.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from ctxledger.integrations import MissingExtra

try:
    from langchain_core.chat_history import BaseChatMessageHistory
    from langchain_core.messages import (
        AIMessage,
        BaseMessage,
        ChatMessage,
        HumanMessage,
        SystemMessage,
        ToolMessage,
    )
except ImportError as exc:  # pragma: no cover - exercised in a process without the extra
    raise MissingExtra("langchain", "langchain", exc.name) from None

from ctxledger._ledger import Ledger
from ctxledger._message_list import MessageList
from ctxledger.integrations._usage import usage_event_of
from ctxledger.store.chat_shapes import ChatShapeError, canonical_message
from ctxledger.store.errors import BatchEventError, EventValidationError
from ctxledger.store.records import RecordedEvent
from ctxledger.store.strict import json_value_ok

__all__ = ["LedgerChatMessageHistory", "message_from", "message_of"]

_EXTRA = "langchain"
_ROLES = {"human": "user", "system": "system", "ai": "assistant", "tool": "tool"}


class LedgerChatMessageHistory(BaseChatMessageHistory):
    """LangChain's chat message history over a ``Ledger``: the messages of the ledger
    session ``session_id``."""

    def __init__(self, ledger: Ledger, session_id: str) -> None:
        self.ledger = ledger
        self.session_id = session_id
        # The history as last read: the next read decodes only what came since.
        self._history: MessageList | None = None

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]
        """The session's messages, in order (retracted ones left out); each read decodes
        only the messages added since the one before (``Ledger.messages_since``)."""
        self._history = self.ledger.messages_since(self.session_id, self._history)
        return [message_from(event) for event in self._history.events]

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        """Append the messages atomically; one the canonical form cannot hold writes none
        (``EventValidationError``, one line naming it)."""
        events = []
        origin: list[int] = []  # the message each event comes from
        for index, message in enumerate(messages):
            try:
                data, extra = message_of(message)
            except ValueError as exc:
                raise EventValidationError(f"messages[{index}]: {exc}") from None
            event: dict[str, Any] = {"type": "message.appended", "data": data}
            if extra:
                event["metadata"] = {"extra": {_EXTRA: extra}}
            events.append(event)
            origin.append(index)
            billed = _billed(message)
            if billed is not None:  # what the provider billed for this reply, with it
                events.append(billed)
                origin.append(index)
        if not events:
            return
        try:
            self.ledger.append(self.session_id, events)
        except BatchEventError as exc:
            reason = exc.reason.removeprefix("message.appended: ").removeprefix("data: ")
            reason = reason.removeprefix("usage.reported: ").removeprefix("data: ")
            raise EventValidationError(f"messages[{origin[exc.index]}]: {reason}") from None

    def clear(self) -> None:
        """Retract every message of the session (one batch); concurrent clears, in any
        process, retract each message once."""
        self.ledger.clear_messages(self.session_id)


def _billed(message: BaseMessage) -> dict[str, Any] | None:
    """The ``usage.reported`` of an ``AIMessage`` whose ``usage_metadata`` and
    ``response_metadata`` say what was billed and by which model (else None)."""
    return usage_event_of(message) if isinstance(message, AIMessage) else None


def message_of(message: BaseMessage) -> tuple[dict[str, Any], dict[str, Any]]:
    """A LangChain message as a canonical chat message, and the fields it cannot hold
    (JSON, to ride in ``metadata.extra``). Raises ``ValueError`` naming the problem."""
    if not isinstance(message, BaseMessage):
        raise ValueError(f"expected a LangChain message, got {type(message).__name__}")
    if isinstance(message, ChatMessage):
        role = message.role
    else:
        found = _ROLES.get(message.type)
        if found is None:
            raise ValueError(f"a {message.type} message is not stored")
        role = found
    data: dict[str, Any] = {"role": role}
    if message.id is not None:
        data["message_id"] = message.id
    if message.name is not None:
        data["name"] = message.name
    content = message.content
    if isinstance(content, str):
        data["content"] = content
    else:
        data["content"] = [{"type": "text", "text": part} if isinstance(part, str) else part
                           for part in content]
    if isinstance(message, AIMessage) and message.tool_calls:
        calls = []
        for call in message.tool_calls:
            if not call.get("id"):
                raise ValueError(f"tool call {call['name']!r} has no id")
            calls.append({"id": call["id"], "type": "function",
                          "function": {"name": call["name"],
                                       "arguments": json.dumps(call["args"])}})
        data["tool_calls"] = calls
    if isinstance(message, ToolMessage):
        data["tool_call_id"] = message.tool_call_id
        if message.status == "error":
            data["is_error"] = True
    try:
        data = canonical_message(data)
    except ChatShapeError as exc:
        raise ValueError(str(exc)) from None
    # Whatever the canonical message gives back differently is kept beside it.
    rebuilt = _build(data, {}).model_dump()
    extra = {key: value for key, value in message.model_dump().items()
             if rebuilt.get(key) != value}
    if extra and not json_value_ok(extra):
        raise ValueError(f"fields {', '.join(sorted(extra))} must be JSON to be stored")
    return data, extra


def message_from(event: RecordedEvent) -> BaseMessage:
    """The LangChain message a stored ``message.appended`` is."""
    extra = event.metadata.get("extra", {}).get(_EXTRA, {})
    return _build(event.data, extra)


def _build(data: Mapping[str, Any], extra: Mapping[str, Any]) -> BaseMessage:
    role = data["role"]
    content = data.get("content")
    fields: dict[str, Any] = {"content": "" if content is None else content,
                              "id": data.get("message_id"), "name": data.get("name")}
    if role == "assistant":
        fields["tool_calls"] = [
            {"name": call["function"]["name"], "args": json.loads(call["function"]["arguments"]),
             "id": call["id"], "type": "tool_call"}
            for call in data.get("tool_calls") or ()]
    if role == "tool":
        fields["tool_call_id"] = data["tool_call_id"]
        fields["status"] = "error" if data.get("is_error") else "success"
    fields.update({key: value for key, value in extra.items() if key not in ("type", "role")})
    if extra.get("type") == "chat" or role not in ("user", "system", "assistant", "tool"):
        return ChatMessage(role=role, **{key: value for key, value in fields.items()
                                         if key not in ("tool_calls", "tool_call_id",
                                                        "status")})
    if role == "user":
        return HumanMessage(**fields)
    if role == "system":
        return SystemMessage(**fields)
    if role == "assistant":
        return AIMessage(**fields)
    return ToolMessage(**fields)
