"""Plain records that cross the store boundary: events to append and events read back."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NamedTuple


@dataclass(frozen=True, slots=True)
class NewEvent:
    """An event to append. ``event_id`` is the idempotency key; one is generated if absent."""

    type: str
    data: dict[str, Any] = field(default_factory=dict)
    event_id: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    schema_version: int | None = None


_new_object = object.__new__
(_set_type, _set_data, _set_event_id, _set_metadata, _set_schema_version) = (
    vars(NewEvent)[name].__set__
    for name in ("type", "data", "event_id", "metadata", "schema_version"))


def new_event(type: str, data: dict[str, Any], event_id: str | None,
              metadata: dict[str, Any], schema_version: int | None) -> NewEvent:
    """``NewEvent(...)`` without the frozen ``__init__`` (its ``object.__setattr__`` per
    field costs more than validating a small payload): the append path makes two per event."""
    event: NewEvent = _new_object(NewEvent)
    _set_type(event, type)
    _set_data(event, data)
    _set_event_id(event, event_id)
    _set_metadata(event, metadata)
    _set_schema_version(event, schema_version)
    return event


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
    warnings: tuple[str, ...] = ()
    """What the append noticed and wrote anyway: each lorebook entry a ``card.set`` or
    ``lorebook.set`` imports that cannot work as written (``ctxledger.Ledger.append``)."""


class PreparedEvent(NamedTuple):
    """A validated event with its canonical JSON, ready to insert (a tuple: made once per
    event on the hot path, where a frozen dataclass's ``__init__`` costs a microsecond)."""

    event: NewEvent
    data_json: str
    metadata_json: str
    client_id: bool
