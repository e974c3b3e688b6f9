"""The injectable clock: the only source of time for recorded events."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

from ctxledger.store.errors import TimestampError

Clock = Callable[[], datetime]
"""A zero-argument callable returning an aware UTC ``datetime``."""


def system_clock() -> datetime:
    """Return the current UTC time, read at call time so freezegun controls it."""
    return datetime.now(UTC)


def ensure_utc(value: datetime, what: str = "timestamp") -> datetime:
    """Return ``value`` in UTC; naive datetimes are rejected because their zone is unknown."""
    if value.tzinfo is None or value.utcoffset() is None:
        raise TimestampError(f"{what} must be timezone-aware (got naive {value.isoformat()})")
    try:
        return value.astimezone(UTC)
    except OverflowError:
        raise TimestampError(f"{what} {value.isoformat()} is out of range") from None


def format_utc(value: datetime) -> str:
    """Render a UTC instant in the fixed-width form used for hashing and digests."""
    return ensure_utc(value).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
