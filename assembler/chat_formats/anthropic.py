"""The messages form as Anthropic's Messages API takes it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ctxledger.assembler.model import ContextMessage


def to_anthropic(messages: Sequence[ContextMessage]) -> dict[str, Any]:
    """``{"system": ..., "messages": [...]}`` for ``client.messages.create``."""
    raise NotImplementedError
