"""ctxledger: an event-sourced session store for LLM applications.

``from ctxledger import Ledger`` is all most users need.
"""

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

__all__ = [
    "Anchor", "AppendResult", "ConcurrencyError", "EventValidationError", "IdempotencyError",
    "IntegrityViolation", "Ledger", "LedgerError", "RecordedEvent", "Seal", "SealSettings",
    "StreamRuleError",
]
__version__ = "0.1.0"
