"""The messages form as OpenAI's chat-completions API takes it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ctxledger.assembler.model import ContextMessage


def to_openai(messages: Sequence[ContextMessage]) -> list[dict[str, Any]]:
    """The ``messages=`` list for ``client.chat.completions.create``."""
    raise NotImplementedError
