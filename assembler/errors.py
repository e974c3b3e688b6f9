"""Errors the assembler raises: bad input (``AssemblyError``, one-line messages, of the
``LedgerError`` family) and a profile breaking the engine's contract (``EngineError``)."""

from __future__ import annotations

from ctxledger.store.errors import LedgerError


class AssemblyError(LedgerError):
    """An assembly cannot be made from this input (unknown profile or session, a read view
    that does not hold what the profile needs, a counter for another encoding...)."""


class EngineError(RuntimeError):
    """A profile broke the engine's contract (a bug, not bad input)."""


class ChatFormatError(AssemblyError):
    """An assembly's messages cannot be put in a chat API's shape as they are (a tool call
    with no answer, media held by its hash only with no resolver...); one line naming the
    message and what to do."""
