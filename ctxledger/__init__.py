"""ctxledger: an event-sourced session store for LLM applications.

``from ctxledger import Ledger`` is all most users need. Names are imported on first use
(PEP 562), so ``ctxledger --version`` starts without loading the database stack.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

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


def __getattr__(name: str) -> Any:
    source = _SOURCES.get(name)
    if source is None:
        raise AttributeError(f"module 'ctxledger' has no attribute {name!r}")
    value = getattr(importlib.import_module(source), name)
    globals()[name] = value
    return value
