"""The canonical form of a chat message, as ``message.appended`` stores it.

One form for every chat API, close to OpenAI's chat-completions message:

- ``role``: ``system``, ``developer``, ``user``, ``assistant`` or ``tool``;
- ``content``: a string, a list of parts (``text``, and ``image``/``file`` parts held as
  references: a URL, a provider file id, or a media type plus the SHA-256 of the bytes),
  or null for an assistant message that only calls tools;
- ``name``: the speaker's name (a persona, a participant);
- ``tool_calls``: an assistant message's calls, each ``{id, type: "function",
  function: {name, arguments}}`` where ``arguments`` is the text of a JSON object;
- ``tool_call_id`` (and ``is_error``): a tool message answers the call with that id.

Apps may send OpenAI's shapes (``image_url`` parts, ``file`` parts) or Anthropic's
(``tool_use``/``tool_result`` blocks); ``store.chat_shapes`` turns them into this form
before it is checked, so both are stored alike and read back in this one form.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    model_serializer,
    model_validator,
)

ChatRole = Literal["system", "developer", "user", "assistant", "tool"]
"""The roles a chat message may have."""

CHAT_ROLES: tuple[str, ...] = ("system", "developer", "user", "assistant", "tool")

ID_MAX = 200
"""Ids (message, tool call) fit the log's 200-character id columns."""

_SHA256 = re.compile(r"[0-9a-f]{64}")
_MEDIA_TYPE = re.compile(r"[a-z0-9][a-z0-9!#$&^_.+-]{0,126}/[a-z0-9][a-z0-9!#$&^_.+-]{0,126}")
# OpenAI's rule for function names; Anthropic's tool names follow the same pattern.
_TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TextPart(_Strict):
    """A part of text."""

    type: Literal["text"]
    text: str


def is_media_type(text: str) -> bool:
    """True for a media type such as ``image/png`` (lowercase, as ``media_type`` holds)."""
    return _MEDIA_TYPE.fullmatch(text) is not None


class _Reference(_Strict):
    """Media held by reference: a URL, a provider's file id, or a media type plus the
    SHA-256 of the bytes."""

    url: str | None = Field(default=None, min_length=1)
    file_id: str | None = Field(default=None, min_length=1, max_length=ID_MAX)
    media_type: str | None = None
    sha256: str | None = None

    @model_serializer(mode="wrap")
    def _as_given(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # Stored as given: an optional field left unset is left out, as at the top level.
        dumped: dict[str, Any] = handler(self)
        return {key: value for key, value in dumped.items()
                if value is not None or key in self.model_fields_set}

    @model_validator(mode="after")
    def _referenced(self) -> _Reference:
        if self.media_type is not None and not _MEDIA_TYPE.fullmatch(self.media_type):
            raise ValueError(f"media_type {self.media_type!r} is not a media type "
                             "such as image/png")
        if self.sha256 is not None and not _SHA256.fullmatch(self.sha256):
            raise ValueError("sha256 must be 64 lowercase hex digits")
        if self.url is None and self.file_id is None and (
                self.media_type is None or self.sha256 is None):
            raise ValueError(f"a {self._kind()} part needs a url, a file_id, or a "
                             "media_type and the sha256 of its bytes")
        return self

    def _kind(self) -> str:
        return "media"


class ImagePart(_Reference):
    """An image, by reference (a URL, which may be a ``data:`` URL; a provider's file id;
    or a media type plus SHA-256). ``detail`` is OpenAI's resolution hint."""

    type: Literal["image"]
    detail: Literal["auto", "low", "high"] | None = None

    def _kind(self) -> str:
        return "image"


class FilePart(_Reference):
    """A file (a PDF, a document), by reference: a URL, a provider's file id, or a media
    type plus SHA-256."""

    type: Literal["file"]
    filename: str | None = Field(default=None, min_length=1)

    def _kind(self) -> str:
        return "file"


ContentPart = Annotated[TextPart | ImagePart | FilePart, Field(discriminator="type")]
"""One part of a message's content."""

PART_TYPES: dict[str, frozenset[str]] = {
    "system": frozenset({"text"}),
    "developer": frozenset({"text"}),
    "user": frozenset({"text", "image", "file"}),
    "assistant": frozenset({"text"}),
    "tool": frozenset({"text", "image"}),
}
"""The part types each role may carry (what both APIs accept for that role)."""


class FunctionCall(_Strict):
    """The function a tool call names, and its arguments as the text of a JSON object."""

    name: str
    arguments: str

    @model_validator(mode="after")
    def _valid(self) -> FunctionCall:
        if not _TOOL_NAME.fullmatch(self.name):
            raise ValueError(f"function name {self.name!r} must be 1-64 letters, digits, "
                             "'_' or '-'")
        try:
            parsed = json.loads(self.arguments)
        except ValueError:
            raise ValueError(f"arguments of {self.name!r} are not JSON: give the text of a "
                             "JSON object") from None
        if not isinstance(parsed, dict):
            raise ValueError(f"arguments of {self.name!r} must be a JSON object")
        return self


class ToolCall(_Strict):
    """One tool call of an assistant message."""

    id: str = Field(min_length=1, max_length=ID_MAX)
    type: Literal["function"]
    function: FunctionCall


def check_message(role: str, content: str | Sequence[object] | None,
                  tool_calls: list[ToolCall] | None, tool_call_id: str | None,
                  is_error: bool | None, *, call_id_required: bool = True) -> None:
    """The rules that tie a message's fields to its role; raises ``ValueError``.
    ``call_id_required=False`` spares a tool result without ``tool_call_id`` (a legacy
    payload)."""
    if content is None and not (role == "assistant" and tool_calls):
        raise ValueError(f"a {role} message needs content (only an assistant message "
                         "with tool_calls may leave it out or null)")
    if content is not None and not isinstance(content, str):
        if not content:
            raise ValueError("content must not be an empty list")
        allowed = PART_TYPES[role]
        for index, part in enumerate(content):
            kind = getattr(part, "type", None)
            if kind not in allowed:
                raise ValueError(f"content[{index}]: a {role} message may not hold a "
                                 f"{kind} part (allowed: {', '.join(sorted(allowed))})")
    if tool_calls is not None:
        if role != "assistant":
            raise ValueError(f"tool_calls belong to an assistant message, not a {role} one")
        if not tool_calls:
            raise ValueError("tool_calls must not be an empty list (leave it out)")
        ids = [call.id for call in tool_calls]
        if len(set(ids)) != len(ids):
            raise ValueError("tool_calls holds the same id twice")
    if role == "tool":
        if tool_call_id is None and call_id_required:
            raise ValueError("a tool message needs tool_call_id, the id of the call it "
                             "answers")
    elif tool_call_id is not None or is_error is not None:
        field = "tool_call_id" if tool_call_id is not None else "is_error"
        raise ValueError(f"{field} belongs to a tool message, not a {role} one")


def content_text(content: str | Sequence[Mapping[str, object]] | None) -> str:
    """The text of stored content: the string, or the text parts joined by a line break
    (media parts carry no text); "" for none."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "\n".join(str(part["text"]) for part in content if part.get("type") == "text")
