"""The immutable event log: append, read, verify. Knows nothing of projections.

Names are imported on first use (PEP 562), so ``import store.errors`` stays cheap: the
CLI's ``--help`` must not pay for SQLAlchemy and pydantic.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

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
    "CATALOG": "catalog", "EventData": "catalog", "parse_data": "catalog",
    "stream_kind": "catalog", "Clock": "clock", "system_clock": "clock",
    "create_engine": "engine", "ConcurrencyError": "errors", "EventValidationError": "errors",
    "IdempotencyError": "errors", "IntegrityViolation": "errors", "LedgerError": "errors",
    "EventLog": "log", "AppendResult": "records", "NewEvent": "records",
    "RecordedEvent": "records", "VerifyReport": "verify",
}

__all__ = [
    "CATALOG", "AppendResult", "Clock", "ConcurrencyError", "EventData", "EventLog",
    "EventValidationError", "IdempotencyError", "IntegrityViolation", "LedgerError",
    "NewEvent", "RecordedEvent", "VerifyReport", "create_engine", "parse_data", "stream_kind",
    "system_clock",
]


def __getattr__(name: str) -> Any:
    module = _SOURCES.get(name)
    if module is None:
        raise AttributeError(f"module 'store' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
