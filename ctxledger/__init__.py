"""ctxledger: an event-sourced session store for LLM applications.

``from ctxledger import Ledger`` is all most users need. Names are imported on first use
(PEP 562), so ``ctxledger --version`` starts without loading the database stack.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from store.lazy import lazy_exports

if TYPE_CHECKING:
    from ctxledger.ledger import Ledger
    from store.anchor import Anchor
    from store.errors import (
        ConcurrencyError,
        DatabaseMissing,
        EventValidationError,
        IdempotencyError,
        IntegrityViolation,
        InvalidArgument,
        LedgerError,
        StreamRuleError,
    )
    from store.records import AppendResult, RecordedEvent
    from store.seal import Seal, SealSettings

_SOURCES = {
    "Ledger": "ctxledger.ledger", "Anchor": "store.anchor",
    "ConcurrencyError": "store.errors", "DatabaseMissing": "store.errors",
    "EventValidationError": "store.errors", "IdempotencyError": "store.errors",
    "IntegrityViolation": "store.errors", "InvalidArgument": "store.errors",
    "LedgerError": "store.errors", "StreamRuleError": "store.errors",
    "AppendResult": "store.records", "RecordedEvent": "store.records",
    "Seal": "store.seal", "SealSettings": "store.seal",
}

__all__ = [
    "Anchor", "AppendResult", "ConcurrencyError", "DatabaseMissing", "EventValidationError",
    "IdempotencyError", "IntegrityViolation", "InvalidArgument", "Ledger", "LedgerError",
    "RecordedEvent", "Seal", "SealSettings", "StreamRuleError",
]
__version__ = "0.1.0"


__getattr__ = lazy_exports(__name__, _SOURCES, globals())
