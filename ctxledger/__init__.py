"""ctxledger: an event-sourced session store for LLM applications.

``from ctxledger import Ledger`` is the one import a user needs. Names are imported from
their home modules on first use, so importing the package (the CLI, the pytest plugin)
stays light.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ctxledger.ledger import Ledger
    from store.anchor import Anchor
    from store.errors import (
        ConcurrencyError,
        EventValidationError,
        IdempotencyError,
        IntegrityViolation,
        LedgerError,
        StreamRuleError,
    )
    from store.records import AppendResult, RecordedEvent
    from store.seal import Seal, SealSettings

_HOMES = {
    "Ledger": "ctxledger.ledger",
    "Anchor": "store.anchor", "Seal": "store.seal", "SealSettings": "store.seal",
    "ConcurrencyError": "store.errors", "EventValidationError": "store.errors",
    "IdempotencyError": "store.errors", "IntegrityViolation": "store.errors",
    "LedgerError": "store.errors", "StreamRuleError": "store.errors",
    "AppendResult": "store.records", "RecordedEvent": "store.records",
}

__all__ = [
    "Anchor", "AppendResult", "ConcurrencyError", "EventValidationError", "IdempotencyError",
    "IntegrityViolation", "Ledger", "LedgerError", "RecordedEvent", "Seal", "SealSettings",
    "StreamRuleError",
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
