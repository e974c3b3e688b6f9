"""What the converters read of a message: the fields of ``assembler.model.ContextMessage``
they use, as a protocol, so this package needs nothing of the model that calls it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from ctxledger.store.chat import FilePart, ImagePart, TextPart, ToolCall


class ChatMessage(Protocol):
    """A chat message in the stored form (``store.chat``), as the converters read it."""

    @property
    def role(self) -> str: ...
    @property
    def content(self) -> str | Sequence[TextPart | ImagePart | FilePart] | None: ...
    @property
    def name(self) -> str | None: ...
    @property
    def tool_calls(self) -> Sequence[ToolCall] | None: ...
    @property
    def tool_call_id(self) -> str | None: ...
    @property
    def is_error(self) -> bool | None: ...
    @property
    def item(self) -> str | None:
        """Where it came from (``message:<id>``), to name it in errors."""
        ...
