"""The immutable event log: append, read, verify. Knows nothing of projections.

Names are imported on first use (PEP 562), so ``import store.errors`` stays cheap: the
CLI's ``--help`` must not pay for SQLAlchemy and pydantic.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from store.lazy import lazy_exports

if TYPE_CHECKING:
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

_SOURCES = {
    "CATALOG": "store.catalog", "EventData": "store.catalog", "parse_data": "store.catalog",
    "stream_kind": "store.catalog", "Clock": "store.clock", "system_clock": "store.clock",
    "create_engine": "store.engine", "ConcurrencyError": "store.errors",
    "EventValidationError": "store.errors", "IdempotencyError": "store.errors",
    "IntegrityViolation": "store.errors", "LedgerError": "store.errors", "EventLog": "store.log",
    "AppendResult": "store.records", "NewEvent": "store.records", "RecordedEvent": "store.records",
    "VerifyReport": "store.verify",
}

__all__ = [
    "CATALOG", "AppendResult", "Clock", "ConcurrencyError", "EventData", "EventLog",
    "EventValidationError", "IdempotencyError", "IntegrityViolation", "LedgerError",
    "NewEvent", "RecordedEvent", "VerifyReport", "create_engine", "parse_data", "stream_kind",
    "system_clock",
]


__getattr__ = lazy_exports(__name__, _SOURCES, globals())
