"""Errors raised by the event store. Each message is one line that names the problem."""

from __future__ import annotations


class LedgerError(Exception):
    """Base class for every domain error ctxledger raises on bad input or state."""


class TimestampError(LedgerError, ValueError):
    """A timestamp is naive (no time zone) or out of the representable range.

    Also a ``ValueError``, which is what such a value is to code that only knows Python.
    """


class EventValidationError(LedgerError):
    """An event's type, data or size is not acceptable; nothing was written."""


class BatchEventError(EventValidationError):
    """One event of a batch is unacceptable. ``index`` is its place in the batch (0-based)
    and ``reason`` the message without the "event N: " prefix, so a caller holding the
    input (the CLI) can name the input line instead."""

    def __init__(self, message: str, *, index: int, reason: str) -> None:
        self.index = index
        self.reason = reason
        super().__init__(message)


class StreamRuleError(BatchEventError):
    """An event contradicts its stream's history (a retraction of an unknown message, a
    second ``session.started``...); checked under the write lock, nothing was written."""


class ConcurrencyError(LedgerError):
    """``expected_version`` did not match the stream's actual version; nothing was written."""

    def __init__(self, stream_id: str, expected: int, actual: int) -> None:
        self.stream_id = stream_id
        self.expected = expected
        self.actual = actual
        super().__init__(
            f"stream {stream_id!r}: expected version {expected}, actual version {actual}"
        )


class IdempotencyError(LedgerError):
    """An ``event_id`` was sent again with different content (or in another batch)."""


class IntegrityViolation(LedgerError):
    """The stored log fails verification (broken hash chain or mutable table)."""


class DatabaseMissing(LedgerError):
    """A read found no ctxledger database at the URL (no SQLite file, or no ``events``
    table); nothing was created."""


class SchemaMissing(LedgerError):
    """The PostgreSQL URL's ``search_path`` names no schema that exists; nothing was
    created."""


class ReadOnlyLedger(LedgerError):
    """A write on a ledger opened read-only (``Ledger.open(..., read_only=True)``, a read
    replica); nothing was written."""


class ReplicaNotReady(LedgerError):
    """A read-only open found a database it cannot answer for: a schema of another
    release, or projections behind the log or built by another version."""


class InvalidArgument(LedgerError, ValueError):
    """An argument is out of range (a negative ``limit`` or ``after``)."""


class ReadableDatabaseWarning(UserWarning):
    """An existing database file other users can read (warned once per file and
    process): every recorded prompt and message is theirs to read."""
