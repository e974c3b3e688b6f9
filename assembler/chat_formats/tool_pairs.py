"""The rule both chat APIs enforce on tool calls: an assistant message that calls tools
is followed, before any other message, by one tool message answering each call.

OpenAI rejects an assistant ``tool_calls`` message whose ids lack tool messages, and a
tool message that answers no call just before it; Anthropic rejects a ``tool_use`` block
without a ``tool_result`` in the next user turn, and a result for an unknown id. The
converters check it once, here, so a bad list fails with one line naming the message
instead of a 400 from the API.
"""

from __future__ import annotations

from collections.abc import Sequence

from ctxledger.assembler.chat_formats.message import ChatMessage
from ctxledger.assembler.errors import ChatFormatError


def where(index: int, message: ChatMessage) -> str:
    """How errors name a message: its index in the list, its role and its item."""
    item = f" {message.item}" if message.item else ""
    return f"message {index} ({message.role}{item})"


def check_tool_pairs(messages: Sequence[ChatMessage]) -> None:
    """Raise ``ChatFormatError`` unless every tool call is answered by the tool messages
    right after its assistant message, and every tool message answers such a call."""
    pending: list[str] = []
    caller = -1
    for index, message in enumerate(messages):
        if message.role == "tool":
            if message.tool_call_id not in pending:
                raise ChatFormatError(
                    f"{where(index, message)} answers tool call {message.tool_call_id!r}, "
                    "which is not an unanswered call of the assistant message just before "
                    "it")
            pending.remove(message.tool_call_id)
            continue
        if pending:
            raise ChatFormatError(
                f"tool call {pending[0]!r} of {where(caller, messages[caller])} has no "
                f"tool message before {where(index, message)}")
        if message.role == "assistant" and message.tool_calls:
            pending = [call.id for call in message.tool_calls]
            caller = index
    if pending:
        raise ChatFormatError(
            f"tool call {pending[0]!r} of {where(caller, messages[caller])} has no tool "
            "message answering it (the list ends first)")
