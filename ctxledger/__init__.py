"""ctxledger: an event-sourced session store for LLM applications.

``from ctxledger import Ledger`` is all most users need.
"""

from ctxledger.ledger import Ledger
from store.errors import (
    ConcurrencyError,
    EventValidationError,
    IdempotencyError,
    IntegrityViolation,
    LedgerError,
)
from store.records import AppendResult, RecordedEvent

__all__ = [
    "AppendResult", "ConcurrencyError", "EventValidationError", "IdempotencyError",
    "IntegrityViolation", "Ledger", "LedgerError", "RecordedEvent",
]
__version__ = "0.1.0"
