"""The message shapes apps send, turned into the canonical form of ``store.chat``.

``message.appended`` runs every payload through ``canonical_message`` before its model
checks it, so what is stored is always canonical, whichever API's shape the app used:

- OpenAI chat completions: ``image_url`` parts become image parts (``detail`` kept);
  ``file`` parts become file parts (``file_id``, ``filename``; inline ``file_data``
  becomes a ``data:`` URL, so nothing is lost). Refused, with one line naming them:
  ``input_audio`` and ``refusal`` parts, an assistant's ``refusal`` or ``audio``, the
  deprecated ``function_call``, ``annotations``, and any key the canonical form lacks.
  Those of them an SDK response dump carries empty (``"refusal": null``) say nothing
  and are dropped, with the dump's null optional fields (``"tool_calls": null``), so the
  dump of a plain answer is stored as the plain message.
- Anthropic Messages: ``text`` blocks; ``image`` blocks (a base64 source becomes a
  ``data:`` URL with its media type, a url source the url, a file source the
  ``file_id``); ``document`` blocks become file parts (their ``title`` the filename);
  ``tool_use`` blocks become the assistant's ``tool_calls`` (``arguments`` is the compact
  JSON text of ``input``, key order kept); each ``tool_result`` block becomes a tool
  message (``tool_call_id`` the ``tool_use_id``, ``is_error`` kept when true). Refused:
  ``thinking`` and ``redacted_thinking`` blocks (their signatures only make sense sent
  back to Anthropic as they were), every other block type, and a set ``cache_control``
  or ``citations`` (request options, not content).
- Canonical input passes through unchanged.

An Anthropic message whose blocks were regrouped (``tool_use`` moved to ``tool_calls``,
``tool_result`` split out) holds a lone text block as a plain string, as OpenAI's shape
of the same message does, so one conversation sent in either shape is stored alike.

A user message with several ``tool_result`` blocks (or tool results and text) is several
canonical messages, in block order. One ``message.appended`` holds one message: such a
message is refused there and goes through ``canonical_conversation`` (used by
``Ledger.append_messages``), where a split message's ``message_id`` ``m`` becomes
``m#1``, ``m#2``... for its pieces in order (a message that stays whole keeps its id).
"""

from __future__ import annotations

import base64
import binascii
import json
import mimetypes
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ctxledger.store.chat import ID_MAX, is_media_type
from ctxledger.store.strict import json_kind

Message = dict[str, Any]
"""A message as a plain dict (checked by ``MessageAppended`` afterwards)."""


class ChatShapeError(ValueError):
    """A message in a shape that cannot be stored; the text is one line naming it."""


SPLIT_MARK = "#"
"""``message_id`` of the n-th piece of a split message: ``<id>#<n>``."""

_CANONICAL_KEYS = frozenset(
    {"message_id", "role", "content", "name", "tool_calls", "tool_call_id", "is_error"})
_PART_KEYS: dict[str, frozenset[str]] = {
    "text": frozenset({"type", "text"}),
    "image": frozenset({"type", "url", "file_id", "media_type", "sha256", "detail"}),
    "file": frozenset({"type", "url", "file_id", "media_type", "sha256", "filename"}),
}
# Keys of OpenAI's assistant message the canonical form cannot hold, and why.
_OPENAI_EXTRAS = {
    "refusal": "an assistant's refusal is not stored: keep its text as the content",
    "audio": "an assistant's audio is not stored",
    "function_call": "function_call is deprecated: send tool_calls",
    "annotations": "annotations (URL citations) are not stored",
}
# Keys of Anthropic's blocks that are request options or response details, not content.
_ANTHROPIC_EXTRAS = {
    "cache_control": "cache_control is a request option, not content: leave it out",
    "citations": "citations are not stored: leave them out",
    "caller": "a tool call made by another tool (caller) is not stored",
    "toolset_name": "toolset_name is not stored",
}
_REFUSED_BLOCKS = {
    "thinking": "thinking blocks are not stored: drop them before appending",
    "redacted_thinking": "redacted_thinking blocks are not stored: drop them before "
                         "appending",
    "input_audio": "input_audio parts are not stored: audio is not supported",
    "refusal": "refusal parts are not stored: keep the refusal's text as a text part",
}
# Only the standard table (no system files): the same guess on every machine.
_TYPES = mimetypes.MimeTypes()


def canonical_message(message: Mapping[str, Any]) -> Message:
    """One message in the canonical form (a mapping already canonical is returned as it
    is). Raises ``ChatShapeError`` for a shape that cannot be stored, or for a message
    that is several canonical messages (use ``canonical_conversation``)."""
    pieces = _pieces(message)
    if len(pieces) != 1:
        raise ChatShapeError(
            f"this message holds {len(pieces)} messages (each Anthropic tool_result is "
            "a tool message of its own): append it with Ledger.append_messages")
    return pieces[0]


def canonical_conversation(messages: Sequence[Any],
                           system: Any = None) -> tuple[list[Message], list[int]]:
    """A conversation in either shape as canonical messages, in order, with the index
    of the input message each came from (-1: the ``system`` given apart, as Anthropic's
    requests carry it; it comes first).

    A message that splits gives its pieces ``message_id`` ``<id>#1``, ``<id>#2``...
    Raises ``ChatShapeError`` naming the first bad message (``messages[3]: ...``).
    """
    if isinstance(messages, str | bytes) or not isinstance(messages, Sequence):
        raise ChatShapeError("messages must be a list of messages")
    out: list[Message] = []
    origins: list[int] = []
    if system is not None:
        out.append({"role": "system", "content": _system_content(system)})
        origins.append(-1)
    for index, message in enumerate(messages):
        try:
            if not isinstance(message, Mapping):
                raise ChatShapeError(f"a message must be an object, got {json_kind(message)}")
            pieces = _pieces(message)
            if len(pieces) > 1:
                _number(pieces, message.get("message_id"))
        except ChatShapeError as exc:
            raise ChatShapeError(f"messages[{index}]: {exc}") from None
        out.extend(pieces)
        origins.extend([index] * len(pieces))
    if not out:
        raise ChatShapeError("no messages to append")
    return out, origins


def _system_content(system: Any) -> str | list[Message]:
    """Anthropic's ``system``: a string, or a list of text blocks."""
    if isinstance(system, str):
        return system
    if isinstance(system, list) and system:
        try:
            return [_anthropic_text(block, f"[{i}]") for i, block in enumerate(system)]
        except ChatShapeError as exc:
            raise ChatShapeError(f"system{exc}") from None
    raise ChatShapeError("system must be a string or a list of text blocks")


def _anthropic_text(block: Any, where: str) -> Message:
    if not isinstance(block, Mapping) or block.get("type") != "text":
        raise ChatShapeError(f"{where}: must be a text block")
    part = _converted_part(block, where)
    assert part["type"] == "text"
    return part


def _number(pieces: list[Message], message_id: Any) -> None:
    """Give the pieces of a split message ``<id>#1``, ``<id>#2``..."""
    if not isinstance(message_id, str) or not message_id:
        return  # no id (or a bad one, which the model names)
    longest = f"{message_id}{SPLIT_MARK}{len(pieces)}"
    if len(longest) > ID_MAX:
        raise ChatShapeError(f"message_id is too long to number the {len(pieces)} messages "
                             f"it splits into ({longest[-20:]!r} would pass {ID_MAX} "
                             "characters)")
    for number, piece in enumerate(pieces, start=1):
        piece["message_id"] = f"{message_id}{SPLIT_MARK}{number}"


def _pieces(message: Mapping[str, Any]) -> list[Message]:
    """The canonical messages one input message is (one, unless it holds tool results)."""
    if not _CANONICAL_KEYS.issuperset(message):
        message = _without_extras(message)
    content = message.get("content")
    if not isinstance(content, list) or not content:
        return [message if isinstance(message, dict) else dict(message)]
    role = message.get("role")
    parts: list[Message] = []
    calls: list[Message] = []
    # Runs of parts and tool messages, in block order.
    groups: list[list[Message] | Message] = []
    changed = regrouped = False
    for index, block in enumerate(content):
        where = f"content[{index}]"
        if not isinstance(block, Mapping):
            raise ChatShapeError(f"{where}: a part must be an object, got {json_kind(block)}")
        kind = block.get("type")
        if kind == "tool_use":
            calls.append(_tool_call(block, role, where))
            regrouped = True
        elif kind == "tool_result":
            groups.append(_tool_message(block, role, where))
            parts = []
            regrouped = True
        else:
            part = _converted_part(block, where)
            changed = changed or part is not block
            if not parts:
                groups.append(parts)
            parts.append(part)
    if not (changed or regrouped):
        return [message if isinstance(message, dict) else dict(message)]
    own = {k: v for k, v in message.items() if k != "content"}
    if calls:
        if message.get("tool_calls") is not None:
            raise ChatShapeError("tool calls given twice: as tool_calls and as tool_use "
                                 "blocks")
        own["tool_calls"] = calls
    pieces: list[Message] = []
    for group in groups:
        if isinstance(group, dict):
            pieces.append(group)
        else:
            text_only = regrouped and len(group) == 1 and group[0]["type"] == "text"
            pieces.append({**own, "content": group[0]["text"] if text_only else group})
    if calls and not any(piece.get("role") == role for piece in pieces):
        pieces.insert(0, {**own, "content": None})  # an assistant turn of calls only
    if not pieces:
        raise ChatShapeError("content holds no blocks that make a message")
    if "message_id" in message:  # the tool messages split out keep it too
        for piece in pieces:
            piece.setdefault("message_id", message["message_id"])
    return pieces


def _without_extras(message: Mapping[str, Any]) -> Message:
    """An OpenAI message (an SDK's dump: ``"refusal": null, "tool_calls": null``...)
    without the keys it carries empty, which say nothing: its extras when null or empty,
    its optional fields when null. Refuses any other key the canonical form lacks."""
    kept: Message = {}
    for key, value in message.items():
        if key in _CANONICAL_KEYS:
            if value is not None or key == "content":
                kept[key] = value
        elif key in _OPENAI_EXTRAS:
            if value is not None and value != []:
                raise ChatShapeError(f"{key}: {_OPENAI_EXTRAS[key]}")
        else:
            raise ChatShapeError(f"unknown message key {key!r} (a message has "
                                 f"{', '.join(sorted(_CANONICAL_KEYS))})")
    return kept


def _converted_part(block: Mapping[str, Any], where: str) -> Message:
    """A content part in the canonical form; ``block`` itself when it already is."""
    kind = block.get("type")
    if kind in _REFUSED_BLOCKS:
        raise ChatShapeError(f"{where}: {_REFUSED_BLOCKS[kind]}")
    if kind == "image_url":
        return _openai_image(block, where)
    if kind == "file" and "file" in block:
        return _openai_file(block, where)
    if kind == "image" and "source" in block:
        return _anthropic_image(block, where)
    if kind == "document":
        return _anthropic_document(block, where)
    known = _PART_KEYS.get(kind) if isinstance(kind, str) else None
    if known is None:
        raise ChatShapeError(f"{where}: unknown part type {kind!r} (known: text, image, file, "
                             "and the OpenAI and Anthropic shapes of them)")
    if known.issuperset(block):
        return block if isinstance(block, dict) else dict(block)
    return _part_without_extras(block, known, where)


def _part_without_extras(block: Mapping[str, Any], known: frozenset[str],
                         where: str) -> Message:
    kept: Message = {}
    for key, value in block.items():
        if key in known:
            kept[key] = value
        elif key in _ANTHROPIC_EXTRAS:
            if value is not None and not (key == "caller" and value == {"type": "direct"}):
                raise ChatShapeError(f"{where}: {_ANTHROPIC_EXTRAS[key]}")
        else:
            raise ChatShapeError(f"{where}: unknown key {key!r} in a {block['type']} part")
    return kept


def _fields(block: Mapping[str, Any], allowed: Iterable[str], what: str,
            where: str) -> Message:
    """``block``'s keys, all of them among ``allowed`` (or Anthropic's empty extras)."""
    known = frozenset(allowed)
    if known.issuperset(block):
        return dict(block)
    return _part_without_extras({**block, "type": what}, known | {"type"}, where)


def _text(value: Any, name: str, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise ChatShapeError(f"{where}: {name} must be a non-empty string")
    return value


def _openai_image(block: Mapping[str, Any], where: str) -> Message:
    _fields(block, ("type", "image_url"), "image_url", where)
    inner = block.get("image_url")
    if not isinstance(inner, Mapping):
        raise ChatShapeError(f"{where}: image_url must be an object with a url")
    fields = _fields(inner, ("url", "detail"), "image_url", f"{where}.image_url")
    part: Message = {"type": "image", "url": _text(fields.get("url"), "url", where)}
    if fields.get("detail") is not None:
        part["detail"] = fields["detail"]
    return part


def _openai_file(block: Mapping[str, Any], where: str) -> Message:
    _fields(block, ("type", "file"), "file", where)
    inner = block.get("file")
    if not isinstance(inner, Mapping):
        raise ChatShapeError(f"{where}: file must be an object")
    fields = _fields(inner, ("file_id", "file_data", "filename"), "file", f"{where}.file")
    part: Message = {"type": "file"}
    if fields.get("file_id") is not None:
        part["file_id"] = fields["file_id"]
    filename = fields.get("filename")
    if fields.get("file_data") is not None:
        data = _text(fields["file_data"], "file_data", where)
        if not data.startswith("data:"):
            guessed = (_TYPES.guess_type(filename, strict=False)[0]
                       if isinstance(filename, str) else None)
            data = _data_url(guessed or "application/octet-stream", data, where)
        part["url"] = data
    if filename is not None:
        part["filename"] = filename
    return part


def _data_url(media_type: Any, data: Any, where: str) -> str:
    """``data:<media type>;base64,<data>``, the data checked to be base64."""
    if not isinstance(media_type, str) or not is_media_type(media_type):
        raise ChatShapeError(f"{where}: media_type {media_type!r} is not a media type such "
                             "as image/png")
    if not isinstance(data, str):
        raise ChatShapeError(f"{where}: data must be base64 text")
    try:
        base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise ChatShapeError(f"{where}: data is not valid base64") from None
    return f"data:{media_type};base64,{data}"


def _source(block: Mapping[str, Any], where: str, *, text: bool) -> Message:
    """An Anthropic ``source`` as the reference fields of a canonical part."""
    source = block.get("source")
    if not isinstance(source, Mapping):
        raise ChatShapeError(f"{where}: source must be an object")
    kind = source.get("type")
    at = f"{where}.source"
    if kind == "base64":
        fields = _fields(source, ("type", "media_type", "data"), "source", at)
        return {"url": _data_url(fields.get("media_type"), fields.get("data"), at)}
    if kind == "url":
        fields = _fields(source, ("type", "url"), "source", at)
        return {"url": _text(fields.get("url"), "url", at)}
    if kind == "file":
        fields = _fields(source, ("type", "file_id"), "source", at)
        return {"file_id": _text(fields.get("file_id"), "file_id", at)}
    if kind == "text" and text:
        fields = _fields(source, ("type", "media_type", "data"), "source", at)
        body = fields.get("data")
        if not isinstance(body, str):
            raise ChatShapeError(f"{at}: data must be text")
        encoded = base64.b64encode(body.encode("utf-8")).decode("ascii")
        return {"url": _data_url(fields.get("media_type") or "text/plain", encoded, at)}
    known = "base64, url, file or text" if text else "base64, url or file"
    raise ChatShapeError(f"{at}: unknown source type {kind!r} (known: {known})")


def _anthropic_image(block: Mapping[str, Any], where: str) -> Message:
    _fields(block, ("type", "source"), "image", where)
    return {"type": "image", **_source(block, where, text=False)}


def _anthropic_document(block: Mapping[str, Any], where: str) -> Message:
    fields = _fields(block, ("type", "source", "title", "context"), "document", where)
    if fields.get("context") is not None:
        raise ChatShapeError(f"{where}: a document's context is not stored")
    part: Message = {"type": "file", **_source(block, where, text=True)}
    if fields.get("title") is not None:
        part["filename"] = fields["title"]
    return part


def _tool_call(block: Mapping[str, Any], role: Any, where: str) -> Message:
    if role != "assistant":
        raise ChatShapeError(f"{where}: a tool_use block belongs to an assistant message, "
                             f"not a {role} one")
    fields = _fields(block, ("type", "id", "name", "input"), "tool_use", where)
    arguments = fields.get("input")
    if not isinstance(arguments, Mapping):
        raise ChatShapeError(f"{where}: a tool_use's input must be an object")
    return {"id": fields.get("id"), "type": "function",
            "function": {"name": fields.get("name"),
                         "arguments": json.dumps(arguments, ensure_ascii=False,
                                                 separators=(",", ":"))}}


def _tool_message(block: Mapping[str, Any], role: Any, where: str) -> Message:
    if role != "user":
        raise ChatShapeError(f"{where}: a tool_result block belongs to a user message, "
                             f"not a {role} one")
    fields = _fields(block, ("type", "tool_use_id", "content", "is_error"), "tool_result",
                     where)
    content = fields.get("content")
    if content is None or content == []:
        content = ""
    elif isinstance(content, list):
        content = [_converted_part(part, f"{where}.content[{i}]")
                   if isinstance(part, Mapping) else part for i, part in enumerate(content)]
    message: Message = {"role": "tool", "content": content,
                        "tool_call_id": fields.get("tool_use_id")}
    is_error = fields.get("is_error")
    if is_error is not None and is_error is not False:  # false: the default, left out
        message["is_error"] = is_error
    return message
