"""ctxledger: an event-sourced session store for LLM applications.

``from ctxledger import Ledger`` is all most users need. Names are imported on first use
(PEP 562), so ``ctxledger --version`` starts without loading the database stack.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ctxledger.store.lazy import lazy_exports

if TYPE_CHECKING:
    from ctxledger.ledger import Ledger
    from ctxledger.store.anchor import Anchor
    from ctxledger.store.errors import (
        ConcurrencyError,
        DatabaseMissing,
        EventValidationError,
        IdempotencyError,
        IntegrityViolation,
        InvalidArgument,
        LedgerError,
        SchemaMissing,
        StreamRuleError,
    )
    from ctxledger.store.records import AppendResult, RecordedEvent
    from ctxledger.store.seal import Seal, SealSettings

_SOURCES = {
    "Ledger": "ctxledger.ledger", "Anchor": "ctxledger.store.anchor",
    "ConcurrencyError": "ctxledger.store.errors", "DatabaseMissing": "ctxledger.store.errors",
    "EventValidationError": "ctxledger.store.errors", "IdempotencyError": "ctxledger.store.errors",
    "IntegrityViolation": "ctxledger.store.errors", "InvalidArgument": "ctxledger.store.errors",
    "LedgerError": "ctxledger.store.errors", "SchemaMissing": "ctxledger.store.errors",
    "StreamRuleError": "ctxledger.store.errors",
    "AppendResult": "ctxledger.store.records", "RecordedEvent": "ctxledger.store.records",
    "Seal": "ctxledger.store.seal", "SealSettings": "ctxledger.store.seal",
}

__all__ = [
    "Anchor", "AppendResult", "ConcurrencyError", "DatabaseMissing", "EventValidationError",
    "IdempotencyError", "IntegrityViolation", "InvalidArgument", "Ledger", "LedgerError",
    "RecordedEvent", "SchemaMissing", "Seal", "SealSettings", "StreamRuleError",
]
__version__ = "0.1.0"


__getattr__ = lazy_exports(__name__, _SOURCES, globals())
