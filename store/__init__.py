"""The immutable event log: append, read, verify. Knows nothing of projections.

Names are imported on first use (PEP 562), so ``import ctxledger.store.errors`` stays cheap: the
CLI's ``--help`` must not pay for SQLAlchemy and pydantic.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ctxledger.store.lazy import lazy_exports

if TYPE_CHECKING:
    from ctxledger.store.catalog import CATALOG, EventData, parse_data
    from ctxledger.store.clock import Clock, system_clock
    from ctxledger.store.errors import (
        ConcurrencyError,
        EventValidationError,
        IdempotencyError,
        IntegrityViolation,
        LedgerError,
    )
    from ctxledger.store.log import EventLog
    from ctxledger.store.records import AppendResult, NewEvent, RecordedEvent
    from ctxledger.store.sql_engine import create_engine
    from ctxledger.store.streams import stream_kind
    from ctxledger.store.verify import VerifyReport

# Each name's module, relative to this package.
_SOURCES = {
    "CATALOG": ".catalog", "EventData": ".catalog", "parse_data": ".catalog",
    "stream_kind": ".streams",
    "Clock": ".clock", "system_clock": ".clock",
    "create_engine": ".sql_engine",
    "ConcurrencyError": ".errors", "EventValidationError": ".errors",
    "IdempotencyError": ".errors", "IntegrityViolation": ".errors", "LedgerError": ".errors",
    "EventLog": ".log",
    "AppendResult": ".records", "NewEvent": ".records", "RecordedEvent": ".records",
    "VerifyReport": ".verify",
}

__all__ = [
    "CATALOG", "AppendResult", "Clock", "ConcurrencyError", "EventData", "EventLog",
    "EventValidationError", "IdempotencyError", "IntegrityViolation", "LedgerError",
    "NewEvent", "RecordedEvent", "VerifyReport", "create_engine", "parse_data", "stream_kind",
    "system_clock",
]


__getattr__ = lazy_exports(__name__, _SOURCES, globals())
