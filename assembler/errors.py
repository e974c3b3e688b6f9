"""Errors the assembler raises on bad input (one-line messages, ``LedgerError`` family)."""

from __future__ import annotations

from ctxledger.store.errors import LedgerError


class AssemblyError(LedgerError):
    """An assembly cannot be made from this input (unknown profile or session, a read view
    that does not hold what the profile needs, a counter for another encoding...)."""
