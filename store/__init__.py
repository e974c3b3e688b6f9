"""The immutable event log: append, read, verify. Knows nothing of projections."""

from store.catalog import CATALOG, EventData, parse_data, stream_kind
from store.clock import Clock, system_clock
from store.engine import create_engine
from store.errors import (
    ConcurrencyError,
    EventValidationError,
    IdempotencyError,
    IntegrityViolation,
    LedgerError,
)
from store.log import EventLog
from store.records import AppendResult, NewEvent, RecordedEvent
from store.verify import VerifyReport

__all__ = [
    "CATALOG", "AppendResult", "Clock", "ConcurrencyError", "EventData", "EventLog",
    "EventValidationError", "IdempotencyError", "IntegrityViolation", "LedgerError",
    "NewEvent", "RecordedEvent", "VerifyReport", "create_engine", "parse_data", "stream_kind",
    "system_clock",
]
