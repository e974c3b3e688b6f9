"""Plain records that cross the store boundary: events to append and events read back."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any


@dataclass(frozen=True, slots=True)
class NewEvent:
    """An event to append. ``event_id`` is the idempotency key; one is generated if absent."""

    type: str
    data: dict[str, Any] = field(default_factory=dict)
    event_id: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    schema_version: int | None = None


@dataclass(frozen=True, slots=True)
class RecordedEvent:
    """An event as stored; ``data`` is already upcast to the current schema version."""

    position: int
    stream_id: str
    stream_version: int
    event_id: str
    type: str
    schema_version: int
    data: dict[str, Any]
    metadata: dict[str, Any]
    recorded_at: datetime
    prev_hash: str
    hash: str


@dataclass(frozen=True, slots=True)
class AppendResult:
    """Outcome of one append: the positions written (or found again) and the new version."""

    positions: tuple[int, ...]
    stream_version: int
    duplicate: bool = False
    """True when every event was already stored with the same content (an idempotent retry)."""
