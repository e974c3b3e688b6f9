"""An OpenAI Agents SDK session kept in a ledger (extra ``openai-agents``).

``LedgerSession(ledger, session_id)`` implements the SDK's ``Session`` protocol. The
Responses-API items a run produces are stored as chat messages in the canonical form
(``message.appended``, ``store.chat``), one event per item:

- a message (``role`` user, system, developer or assistant) is that message: its text
  parts (``input_text``, ``output_text``) text parts, ``input_image`` an image part,
  ``input_file`` by ``file_id`` a file part;
- a ``function_call`` is an assistant message with that one tool call (``call_id`` its
  id, ``name``, ``arguments``);
- a ``function_call_output`` is a tool message answering ``call_id``.

What the canonical form has no field for (the item's ``type``, ``id``, ``status``, a
part's ``annotations``) rides in the event's ``metadata.extra``, so ``get_items`` gives
back the very items that were added. Other item types (reasoning, hosted tool calls) are
refused with one line naming them, before anything is written.

The log is append-only: ``pop_item`` appends a ``message.retracted`` for the newest item
and ``clear_session`` one for each item (one batch), so ``replay`` still shows the
session before either. With ``context_limit``, ``get_items`` returns the history window
that fits that many tokens (``Ledger.history_window``, a tool call kept with its answers)
instead of the raw tail.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

from ctxledger.integrations import MissingExtra

try:
    from agents.items import TResponseInputItem
    from agents.memory.session import SessionABC
    from agents.memory.session_settings import (
        SessionSettings,
        coerce_session_settings,
        resolve_session_limit,
    )
except ImportError as exc:  # pragma: no cover - exercised in a process without the extra
    raise MissingExtra("openai_agents", "openai-agents", exc.name) from None

from ctxledger._ledger import Ledger
from ctxledger._message_list import MessageList
from ctxledger.store.errors import BatchEventError, EventValidationError
from ctxledger.store.gc_pause import cyclic_gc_paused
from ctxledger.store.records import AppendResult, RecordedEvent

__all__ = ["LedgerSession"]

_EXTRA = "openai_agents"
# The fields of each item kind that the canonical message holds.
_HELD = {"message": {"role", "content"}, "function_call": {"call_id", "name", "arguments"},
         "function_call_output": {"call_id", "output"}}
_PART_HELD = {"input_text": {"text"}, "output_text": {"text"},
              "input_image": {"image_url", "file_id", "detail"}, "input_file": {"file_id"}}


class LedgerSession(SessionABC):
    """The SDK's ``Session`` over a ``Ledger``: the session's items are the chat
    messages of the ledger session ``session_id``.

    ``context_limit`` (tokens; ``response_reserve`` kept free) makes ``get_items``
    return the fitted history window instead of the raw tail; ``limit`` then takes the
    newest of those. ``session_settings`` is the SDK's ``SessionSettings`` or a dict of
    its fields (an unknown key raises the SDK's one-line ``TypeError``); its ``limit``
    is what ``get_items`` without a limit returns, as in every session of the SDK.
    """

    def __init__(self, ledger: Ledger, session_id: str, *, context_limit: int | None = None,
                 response_reserve: int = 0,
                 session_settings: SessionSettings | dict[str, Any] | None = None) -> None:
        self.ledger = ledger
        self.session_id = session_id
        self.context_limit = context_limit
        self.response_reserve = response_reserve
        # The SDK's own coercion: the same verdict on a dict as its sessions give.
        self.session_settings: SessionSettings = (
            SessionSettings() if session_settings is None
            else coerce_session_settings(session_settings))
        # The whole history as last read: the next read decodes only what came since.
        self._history: MessageList | None = None

    # -- the Session protocol (async, as the SDK defines it) ------------------------------

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The session's items in order (the newest ``limit``, by default
        ``session_settings.limit``), or the window fitted under ``context_limit`` when
        it is set."""
        return await asyncio.to_thread(self.items, limit)

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Append the items as chat messages, atomically: one item the canonical form
        cannot hold writes none of them (``EventValidationError``, one line)."""
        await asyncio.to_thread(self.add, items)

    async def pop_item(self) -> TResponseInputItem | None:
        """Retract the newest item and return it; None when the session has none.
        Concurrent pops, in any process, each return a different item."""
        return await asyncio.to_thread(self.pop)

    async def clear_session(self) -> None:
        """Retract every item of the session (one batch)."""
        await asyncio.to_thread(self.clear)

    # -- the same, synchronously ----------------------------------------------------------

    def items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """``get_items`` without the event loop."""
        limit = resolve_session_limit(limit, self.session_settings)
        if self.context_limit is not None:
            events = self.ledger.history_window(self.session_id, self.context_limit,
                                                response_reserve=self.response_reserve)
            if limit is not None:
                events = events[max(0, len(events) - limit):] if limit > 0 else []
        elif limit is None:
            self._history = self.ledger.messages_since(self.session_id, self._history)
            events = list(self._history.events)
        else:
            events = self.ledger.messages(self.session_id, last=limit)
        # A whole history's items are many small dicts and no cycle: the collector's
        # passes over them would cost more than building them.
        with cyclic_gc_paused():
            return [item_of(event) for event in events]

    def add(self, items: Sequence[TResponseInputItem]) -> None:
        """``add_items`` without the event loop."""
        events = []
        for index, item in enumerate(items):
            try:
                data, extra = message_of(item)
            except ValueError as exc:
                raise EventValidationError(f"items[{index}]: {exc}") from None
            events.append({"type": "message.appended", "data": data,
                           "metadata": {"extra": {_EXTRA: extra}}})
        if events:
            try:
                self.ledger.append(self.session_id, events)
            except BatchEventError as exc:
                raise EventValidationError(
                    f"items[{exc.index}]: "
                    f"{exc.reason.removeprefix('message.appended: ').removeprefix('data: ')}"
                ) from None

    def pop(self) -> TResponseInputItem | None:
        """``pop_item`` without the event loop."""
        popped = self.ledger.pop_message(self.session_id)
        return None if popped is None else item_of(popped)

    def clear(self) -> None:
        """``clear_session`` without the event loop."""
        self.ledger.clear_messages(self.session_id)

    # -- what the provider billed ---------------------------------------------------------

    def report_run_usage(self, result: Any, *, model: str,
                         assembly: Any = None) -> list[AppendResult]:
        """Record what the provider billed for each model response of an Agents run
        (``RunResult.raw_responses``, or one ``ModelResponse``): one ``usage.reported``
        each, against ``assembly`` (an ``Assembly``, its digest or position) when given.
        ``model`` names the model the run called (a ``ModelResponse`` does not)."""
        from ctxledger.integrations._usage import report_usage_of

        responses = getattr(result, "raw_responses", None)
        found = list(responses) if responses is not None else [result]
        return [report_usage_of(self.ledger, self.session_id, response, model=model,
                                assembly=assembly) for response in found]


def message_of(item: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """A Responses-API item as a canonical message and the fields it leaves over.
    Raises ``ValueError`` (one line) for an item the canonical form cannot hold."""
    if not isinstance(item, Mapping):
        raise ValueError("an item must be an object")
    kind = str(item.get("type", "message"))
    held = _HELD.get(kind)
    if held is None:
        raise ValueError(f"a {kind} item is not stored: LedgerSession stores messages, "
                         "function calls and function call outputs")
    extra: dict[str, Any] = {key: value for key, value in item.items() if key not in held}
    if kind == "function_call":
        message: dict[str, Any] = {
            "role": "assistant", "content": None,
            "tool_calls": [{"id": item["call_id"], "type": "function",
                            "function": {"name": item["name"],
                                         "arguments": item["arguments"]}}]}
    elif kind == "function_call_output":
        output = item["output"]
        message = {"role": "tool", "tool_call_id": item["call_id"]}
        if isinstance(output, str):
            message["content"] = output
        else:
            message["content"], extra["parts"] = _parts(output)
    else:
        content = item["content"]
        message = {"role": item["role"]}
        if isinstance(content, str):
            message["content"] = content
        else:
            message["content"], extra["parts"] = _parts(content)
    return message, extra


def _parts(parts: Sequence[Mapping[str, Any]]) -> tuple[list[dict[str, Any]],
                                                        list[dict[str, Any]]]:
    out: list[dict[str, Any]] = []
    left: list[dict[str, Any]] = []
    for index, part in enumerate(parts):
        kind = str(part.get("type"))
        held = _PART_HELD.get(kind)
        if held is None:
            raise ValueError(f"content[{index}]: a {kind} part is not stored")
        if kind in ("input_text", "output_text"):
            out.append({"type": "text", "text": part["text"]})
        elif kind == "input_image":
            image = {"type": "image"}
            if part.get("image_url") is not None:
                image["url"] = part["image_url"]
            if part.get("file_id") is not None:
                image["file_id"] = part["file_id"]
            if part.get("detail") is not None:
                image["detail"] = part["detail"]
            out.append(image)
        else:
            if part.get("file_id") is None:
                raise ValueError(f"content[{index}]: an input_file part is stored by "
                                 "file_id only")
            out.append({"type": "file", "file_id": part["file_id"]})
        left.append({key: value for key, value in part.items() if key not in held})
    return out, left


def item_of(event: RecordedEvent) -> TResponseInputItem:
    """The Responses-API item a stored message is (the fields ``message_of`` left over
    put back)."""
    data = event.data
    extra = dict(event.metadata.get("extra", {}).get(_EXTRA, {}))
    parts = extra.pop("parts", None)
    content: Any = data.get("content")
    item: dict[str, Any] = dict(extra)
    if data["role"] == "assistant" and data.get("tool_calls"):
        (call,) = data["tool_calls"]
        item.setdefault("type", "function_call")
        item.update(call_id=call["id"], name=call["function"]["name"],
                    arguments=call["function"]["arguments"])
    elif data["role"] == "tool":
        item.setdefault("type", "function_call_output")
        item.update(call_id=data["tool_call_id"],
                    output=content if parts is None else _items_parts(content, parts, "input"))
    else:
        item["role"] = data["role"]
        side = "output" if data["role"] == "assistant" else "input"
        item["content"] = content if parts is None else _items_parts(content, parts, side)
    return item  # type: ignore[return-value]


def _items_parts(content: Sequence[Mapping[str, Any]], left: Sequence[Mapping[str, Any]],
                 side: str) -> list[dict[str, Any]]:
    out = []
    for part, rest in zip(content, left, strict=True):
        rebuilt = dict(rest)
        if part["type"] == "text":
            rebuilt.setdefault("type", f"{side}_text")
            rebuilt["text"] = part["text"]
        elif part["type"] == "image":
            rebuilt.setdefault("type", "input_image")
            for source, target in (("url", "image_url"), ("file_id", "file_id"),
                                   ("detail", "detail")):
                if source in part:
                    rebuilt[target] = part[source]
        else:
            rebuilt.setdefault("type", "input_file")
            rebuilt["file_id"] = part["file_id"]
        out.append(rebuilt)
    return out
