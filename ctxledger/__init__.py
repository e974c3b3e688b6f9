"""ctxledger: an event-sourced session store for LLM applications.

``from ctxledger import Ledger`` is all most users need. Names are imported on first
use, so importing a submodule (the pytest plugin, the CLI) does not load the whole stack.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ctxledger.ledger import Ledger
    from store.errors import (
        ConcurrencyError,
        EventValidationError,
        IdempotencyError,
        IntegrityViolation,
        LedgerError,
    )
    from store.records import AppendResult, RecordedEvent

_HOMES = {
    "Ledger": "ctxledger.ledger",
    "ConcurrencyError": "store.errors", "EventValidationError": "store.errors",
    "IdempotencyError": "store.errors", "IntegrityViolation": "store.errors",
    "LedgerError": "store.errors",
    "AppendResult": "store.records", "RecordedEvent": "store.records",
}

__all__ = [
    "AppendResult", "ConcurrencyError", "EventValidationError", "IdempotencyError",
    "IntegrityViolation", "Ledger", "LedgerError", "RecordedEvent",
]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    """Import a public name from its home module on first use."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'ctxledger' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value
