"""A chat message of the log as it goes out: its place in ``Assembly.messages`` and its
cost as sent (``chat_tokens``).

The stored message is already checked (``store.chat``), so its parts and tool calls are
built here without a second validation: a window of hundreds of messages is rebuilt on
every turn.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from ctxledger.assembler.candidates import Candidate, Said
from ctxledger.assembler.chat_tokens import MessageOverhead, message_tokens
from ctxledger.assembler.model import ContextMessage
from ctxledger.assembler.tokens import TokenCounter
from ctxledger.projections.session_view import Message
from ctxledger.store.chat import ChatRole, FilePart, FunctionCall, ImagePart, TextPart, ToolCall

UNPAIRED_ROLE: ChatRole = "user"
"""The role an unpaired tool result is sent under (``history_window``)."""


def sent_content(message: Message) -> str | tuple[Mapping[str, Any], ...] | None:
    """The content as sent: the parts, the string, or None for an assistant message that
    only calls tools."""
    if message.parts is not None:
        return message.parts
    if not message.content and message.tool_calls:
        return None
    return message.content


def sent_cost(counter: TokenCounter, message: Message, overhead: MessageOverhead, *,
              line: str | None = None) -> int:
    """What ``message`` costs as sent; with ``line``, as an unpaired tool result sent as a
    user message holding that text line."""
    if line is not None:
        return message_tokens(counter, role=UNPAIRED_ROLE, content=line, overhead=overhead)
    return message_tokens(counter, role=message.role, content=sent_content(message),
                          name=message.name, tool_calls=message.tool_calls,
                          overhead=overhead)


def cost_texts(message: Message) -> list[str]:
    """Every text ``sent_cost`` counts (to look them up in the token cache at once)."""
    texts = [message.role]
    if message.parts is not None:
        texts.extend(str(part["text"]) for part in message.parts if part.get("type") == "text")
    elif message.content:
        texts.append(message.content)
    if message.name:
        texts.append(message.name)
    for call in message.tool_calls:
        texts.extend((str(call["function"]["name"]), str(call["function"]["arguments"])))
    return texts


_PARTS: dict[str, Any] = {"text": TextPart, "image": ImagePart, "file": FilePart}


def said_message(plan: Said, kept: Candidate) -> ContextMessage:
    """The ``ContextMessage`` of a kept chat message."""
    message = plan.message
    if plan.as_text is not None:
        return ContextMessage.model_construct(
            role=plan.as_text, content=kept.text, name=None, tool_calls=None,
            tool_call_id=None, is_error=None, item=kept.id, sections=[kept.section],
            tokens=kept.tokens)
    content: Any = sent_content(message)
    if isinstance(content, tuple):
        content = [_PARTS[str(part["type"])].model_construct(**part) for part in content]
    calls = [ToolCall.model_construct(id=call["id"], type=call["type"],
                                      function=FunctionCall.model_construct(**call["function"]))
             for call in message.tool_calls] or None
    return ContextMessage.model_construct(
        role=cast(ChatRole, message.role), content=content, name=message.name,
        tool_calls=calls,
        tool_call_id=message.tool_call_id, is_error=message.is_error, item=kept.id,
        sections=[kept.section], tokens=kept.tokens)
