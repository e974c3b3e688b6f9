"""The messages form as Anthropic's Messages API takes it: ``{"system", "messages"}``.

Claude's API has two roles in ``messages`` (``user`` and ``assistant``) and the system
prompt as a top-level field, so the stored form is reshaped:

- the leading ``system``/``developer`` messages become ``system``, a list of text blocks
  (left out when there is none); a ``system``/``developer`` message further down (e.g.
  instructions placed after the chat history) becomes text of a user turn;
- an assistant message's text, then its tool calls as ``tool_use`` blocks (``input`` =
  the parsed arguments);
- tool messages become ``tool_result`` blocks (``is_error`` when set) in the user turn
  after the assistant turn that called them, before any other block of that turn;
- consecutive messages that land on the same role merge into one turn (so the results
  of one assistant turn are all in the next user message);
- a turn made of one message whose content is a string keeps the string; any other turn
  is a list of blocks; text that is empty or only white space makes no block, and a
  message left with no block makes no turn;
- parts: an ``image`` becomes an ``image`` block (a URL source, or base64 from a
  ``data:`` URL or ``resolve_media``: JPEG, PNG, GIF or WebP); a ``file`` becomes a
  ``document`` block (its file id, a URL, base64 PDF, or plain text), titled with its
  ``filename``; an image's ``detail`` has no equivalent and is dropped;
- ``name`` has no field in this API and is dropped (put the speaker in the text if the
  model must tell participants of one role apart).

The first turn may be the assistant's (a character's greeting): Anthropic's API takes
that, though some hosts of Claude models ask for a user turn first. The list may be
empty when the whole context is system text: the app appends the user's turn before it
calls ``messages.create``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ctxledger.assembler.chat_formats.media import (
    Inline,
    MediaResolver,
    is_data_url,
    parse_data_url,
    resolve,
)
from ctxledger.assembler.chat_formats.message import ChatMessage
from ctxledger.assembler.chat_formats.tool_pairs import check_tool_pairs, where
from ctxledger.assembler.errors import ChatFormatError
from ctxledger.store.chat import FilePart, ImagePart, TextPart

API = "Anthropic"

IMAGE_TYPES = ("image/jpeg", "image/png", "image/gif", "image/webp")
"""The media types of a base64 image source."""

_INSTRUCTIONS = ("system", "developer")


@dataclass
class _Turn:
    role: str
    blocks: list[dict[str, Any]]
    plain: str | None
    """The content string, while the turn is one message with string content."""

    def add(self, blocks: list[dict[str, Any]]) -> None:
        self.blocks.extend(blocks)
        self.plain = None

    def param(self) -> dict[str, Any]:
        if self.plain is not None:
            return {"role": self.role, "content": self.plain}
        # Results answer the assistant turn just before: they lead the user turn.
        results = [b for b in self.blocks if b["type"] == "tool_result"]
        others = [b for b in self.blocks if b["type"] != "tool_result"]
        return {"role": self.role, "content": results + others}


def to_anthropic(messages: Sequence[ChatMessage], *,
                 resolve_media: MediaResolver | None = None) -> dict[str, Any]:
    """``{"system": [...], "messages": [...]}`` for ``client.messages.create``.

    Raises ``ChatFormatError`` (one line naming the message) for a tool call without its
    answer, a tool message answering no call, or media this API cannot take as held."""
    check_tool_pairs(messages)
    system: list[dict[str, Any]] = []
    start = 0
    while start < len(messages) and messages[start].role in _INSTRUCTIONS:
        system.extend(_text_blocks(messages[start].content))
        start += 1
    turns: list[_Turn] = []
    for index in range(start, len(messages)):
        message = messages[index]
        role = "assistant" if message.role == "assistant" else "user"
        blocks = _blocks(message, where(index, message), resolve_media)
        if not blocks:
            continue
        if turns and turns[-1].role == role:
            turns[-1].add(blocks)
            continue
        plain = (message.content if isinstance(message.content, str)
                 and message.role != "tool" and not message.tool_calls else None)
        turns.append(_Turn(role, blocks, plain))
    out: dict[str, Any] = {}
    if system:
        out["system"] = system
    out["messages"] = [turn.param() for turn in turns]
    return out


def _text_blocks(content: str | Sequence[object] | None) -> list[dict[str, Any]]:
    if content is None:
        return []
    texts = [content] if isinstance(content, str) else [
        part.text for part in content if isinstance(part, TextPart)]
    return [{"type": "text", "text": text} for text in texts if text.strip()]


def _blocks(message: ChatMessage, label: str,
            resolver: MediaResolver | None) -> list[dict[str, Any]]:
    if message.role == "tool":
        return [_tool_result(message, label, resolver)]
    content = message.content
    if content is None or isinstance(content, str):
        blocks = _text_blocks(content)
    else:
        blocks = []
        for number, part in enumerate(content):
            if isinstance(part, TextPart):
                blocks.extend(_text_blocks(part.text))
            else:
                blocks.append(_media(part, f"{label}, content[{number}]", resolver))
    for call in message.tool_calls or ():
        blocks.append({"type": "tool_use", "id": call.id, "name": call.function.name,
                       "input": json.loads(call.function.arguments)})
    return blocks


def _tool_result(message: ChatMessage, label: str,
                 resolver: MediaResolver | None) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": message.tool_call_id}
    content = message.content
    if isinstance(content, str):
        if content.strip():
            block["content"] = content
    elif content is not None:
        inner: list[dict[str, Any]] = []
        for number, part in enumerate(content):
            if isinstance(part, TextPart):
                inner.extend(_text_blocks(part.text))
            else:
                inner.append(_media(part, f"{label}, content[{number}]", resolver))
        if inner:
            block["content"] = inner
    if message.is_error:
        block["is_error"] = True
    return block


def _media(part: ImagePart | FilePart, label: str,
           resolver: MediaResolver | None) -> dict[str, Any]:
    if isinstance(part, ImagePart):
        return {"type": "image", "source": _image_source(part, label, resolver)}
    block: dict[str, Any] = {"type": "document", "source": _document_source(part, label,
                                                                             resolver)}
    if part.filename is not None:
        block["title"] = part.filename
    return block


def _inline(part: ImagePart | FilePart, label: str, resolver: MediaResolver | None) -> Inline:
    if is_data_url(part.url):
        return parse_data_url(str(part.url), label)
    return resolve(part, resolver, label, API)


def _image_source(part: ImagePart, label: str,
                  resolver: MediaResolver | None) -> dict[str, Any]:
    if part.url is not None and not is_data_url(part.url):
        return {"type": "url", "url": part.url}
    inline = _inline(part, label, resolver)
    if inline.media_type not in IMAGE_TYPES:
        raise ChatFormatError(f"{label}: {API} takes images as {', '.join(IMAGE_TYPES)}, "
                              f"not {inline.media_type}")
    return {"type": "base64", "media_type": inline.media_type, "data": inline.data}


def _document_source(part: FilePart, label: str,
                     resolver: MediaResolver | None) -> dict[str, Any]:
    if part.file_id is not None:
        return {"type": "file", "file_id": part.file_id}
    if part.url is not None and not is_data_url(part.url):
        return {"type": "url", "url": part.url}
    inline = _inline(part, label, resolver)
    if inline.media_type == "application/pdf":
        return {"type": "base64", "media_type": "application/pdf", "data": inline.data}
    if inline.media_type == "text/plain":
        return {"type": "text", "media_type": "text/plain", "data": inline.text(label)}
    raise ChatFormatError(f"{label}: {API} takes documents as application/pdf or "
                          f"text/plain, not {inline.media_type}")
