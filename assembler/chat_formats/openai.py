"""The messages form as OpenAI's chat-completions API takes it (``messages=``).

The stored form is close to OpenAI's own, so most of a message passes as it is:

- roles ``system``, ``developer``, ``user``, ``assistant``, ``tool`` stay as they are;
  ``name`` is kept on every role that takes one (not on ``tool`` messages);
- an assistant message's ``tool_calls`` pass as they are; its ``content`` is null when it
  only calls tools;
- a tool message carries ``tool_call_id``; ``is_error`` has no field in this API and is
  left out (the tool's text says what failed);
- parts: ``text`` stays; an ``image`` becomes an ``image_url`` part (its URL, a ``data:``
  URL, with ``detail`` when set); a ``file`` becomes a ``file`` part (``file_id``, or
  ``file_data`` as a ``data:`` URL with a ``filename``, which OpenAI requires: the part's
  own or ``file`` plus an extension for the media type);
- a tool message may hold only text in this API: its image parts move to a user message
  right after the run of tool messages, introduced by a text part naming the call, so
  the model still sees them and every call is still answered before that message.

Media held only by media type and SHA-256 takes a ``resolve_media`` function
(``chat_formats.media``). A file by an ``https:`` URL has no place in this API (it takes
file ids or inline data) and is an error unless the part also names its bytes' hash and
a resolver gives them. Every output is plain JSON data with a fixed key order.
"""

from __future__ import annotations

from collections.abc import Sequence
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

API = "OpenAI"

_EXTENSIONS = {"application/pdf": ".pdf", "text/plain": ".txt", "text/markdown": ".md",
               "text/csv": ".csv", "application/json": ".json", "text/html": ".html"}
"""A filename for inline file data that has none (OpenAI requires one)."""


def to_openai(messages: Sequence[ChatMessage], *,
              resolve_media: MediaResolver | None = None) -> list[dict[str, Any]]:
    """The ``messages=`` list for ``client.chat.completions.create``.

    Raises ``ChatFormatError`` (one line naming the message) for a tool call without its
    answer, a tool message answering no call, or media this API cannot take as held."""
    check_tool_pairs(messages)
    out: list[dict[str, Any]] = []
    moved: list[dict[str, Any]] = []  # images of the current run of tool messages
    for index, message in enumerate(messages):
        if message.role != "tool" and moved:
            out.append({"role": "user", "content": moved})
            moved = []
        label = where(index, message)
        if message.role == "tool":
            out.append(_tool(message, label, resolve_media, moved))
        else:
            out.append(_message(message, label, resolve_media))
    if moved:
        out.append({"role": "user", "content": moved})
    return out


def _message(message: ChatMessage, label: str,
             resolver: MediaResolver | None) -> dict[str, Any]:
    found: dict[str, Any] = {"role": message.role}
    if message.name is not None:
        found["name"] = message.name
    content = message.content
    if content is None or isinstance(content, str):
        found["content"] = content
    else:
        found["content"] = [_part(part, f"{label}, content[{number}]", resolver)
                            for number, part in enumerate(content)]
    if message.tool_calls:
        found["tool_calls"] = [
            {"id": call.id, "type": call.type,
             "function": {"name": call.function.name, "arguments": call.function.arguments}}
            for call in message.tool_calls]
    return found


def _tool(message: ChatMessage, label: str, resolver: MediaResolver | None,
          moved: list[dict[str, Any]]) -> dict[str, Any]:
    content = message.content
    if content is None or isinstance(content, str):
        text: str | list[dict[str, Any]] = content or ""
    else:
        text = [{"type": "text", "text": part.text} for part in content
                if isinstance(part, TextPart)]
        images = [(number, part) for number, part in enumerate(content)
                  if not isinstance(part, TextPart)]
        if images:
            moved.append({"type": "text", "text": f"Images returned by tool call "
                                                  f"{message.tool_call_id}:"})
            moved.extend(_part(part, f"{label}, content[{number}]", resolver)
                         for number, part in images)
            if not text:
                text = "(the images follow in the next user message)"
    return {"role": "tool", "tool_call_id": message.tool_call_id, "content": text}


def _part(part: TextPart | ImagePart | FilePart, label: str,
          resolver: MediaResolver | None) -> dict[str, Any]:
    if isinstance(part, TextPart):
        return {"type": "text", "text": part.text}
    if isinstance(part, ImagePart):
        url = part.url if part.url is not None else resolve(part, resolver, label,
                                                            API).data_url()
        image: dict[str, Any] = {"url": url}
        if part.detail is not None:
            image["detail"] = part.detail
        return {"type": "image_url", "image_url": image}
    if part.file_id is not None:
        return {"type": "file", "file": {"file_id": part.file_id}}
    if is_data_url(part.url):
        inline = parse_data_url(str(part.url), label)
    elif part.sha256 is not None:
        inline = resolve(part, resolver, label, API)
    else:
        raise ChatFormatError(f"{label}: {API} takes a file as a file id or inline data, "
                              f"not by URL; upload it, or hold it by media type and sha256")
    return {"type": "file", "file": {"filename": part.filename or _filename(inline),
                                     "file_data": inline.data_url()}}


def _filename(inline: Inline) -> str:
    return "file" + _EXTENSIONS.get(inline.media_type, "")
