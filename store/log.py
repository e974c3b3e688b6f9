"""``EventLog``: the store's one stateful object, tying engine, clock and limits together."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from ctxledger.store import read as _read
from ctxledger.store.anchor import Anchor, check_anchor
from ctxledger.store.append import (
    InTransactionHook,
    StreamHeads,
    append_in_transaction,
    stream_head,
)
from ctxledger.store.backends import backend_for, locks
from ctxledger.store.chain_key import ChainKey, chain_key_from_env
from ctxledger.store.clock import Clock, format_utc, system_clock
from ctxledger.store.errors import (
    BatchEventError,
    EventValidationError,
    LedgerError,
    ReadOnlyLedger,
)
from ctxledger.store.hash_chain import GENESIS_HASH
from ctxledger.store.records import AppendResult, NewEvent, PreparedEvent, RecordedEvent
from ctxledger.store.seal import (
    ChainPoint,
    Seal,
    SealSettings,
    check_seals,
    extend_chain,
    fold_chain,
    last_seal,
    list_seals,
    seal_in_transaction,
)
from ctxledger.store.streams import check_stream_id
from ctxledger.store.strict import DEFAULT_MAX_EVENT_BYTES
from ctxledger.store.verify import VerifyReport, verify_log
from ctxledger.store.witness import Head, Witness, WitnessError, WitnessSettings, check_heads

EventInput = NewEvent | Mapping[str, Any]

_WITNESS_PENDING = "ctxledger_witness_pending"
"""``Connection.info`` key: events ``append_in`` wrote in a witnessed transaction."""


SharedKeys = Callable[[str, Sequence[NewEvent]], Sequence[str]]
"""Given (stream_id, batch), the lock keys of rows the in-transaction hook updates that
appends to other streams update too, where appends run side by side
(``Backend.concurrent_appends``; see ``append_in_transaction``)."""

EventCheck = Callable[[str, NewEvent], None]
"""Called with (stream_id, validated event) before an append writes anything; raises
``EventValidationError`` to reject the event (and with it the whole batch)."""


class EventLog:
    """Append to and read from the event log of one database.

    ``in_transaction`` runs inside every append transaction with the new events; the
    facade uses it to update inline projections atomically with the append. ``check``
    runs on every validated event before anything is written; it raises
    ``EventValidationError`` to reject it (the facade checks setting values with it).
    """

    def __init__(self, engine: Engine, *, clock: Clock = system_clock,
                 max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
                 in_transaction: InTransactionHook | None = None,
                 seal: SealSettings | None = None,
                 check: EventCheck | None = None,
                 shared_keys: SharedKeys | None = None,
                 witness: Witness | None = None,
                 witness_settings: WitnessSettings | None = None,
                 read_only: bool = False) -> None:
        self.engine = engine
        self.read_only = read_only
        """Every write raises ``ReadOnlyLedger`` before it touches the database."""
        self.backend = backend_for(engine)
        """The database's strategy (``store.backends``)."""
        self.check = check
        self.shared_keys = shared_keys if self.backend.concurrent_appends else None
        self.chain_key = chain_key_from_env()
        """Appends link with this key (``CTXLEDGER_CHAIN_KEY`` when the log was opened)."""
        self.seal_settings = seal or SealSettings()
        self._sealed_upto: int | None = None  # a lower bound of the last seal's position
        self.clock = clock
        self.max_event_bytes = max_event_bytes
        self.in_transaction = in_transaction
        self.heads = StreamHeads()
        """Stream heads as of this process's last commits (see ``store.append``)."""
        self._connections = self.backend.connections(engine)
        # The append's hot path, looked up once.
        self._append_transaction = (self._refuse_write if read_only
                                    else self._connections.append_transaction)
        self.witness = witness
        """Where heads go after commits (``store.witness``); None: nowhere."""
        self.witness_settings = witness_settings or WitnessSettings()
        if witness is not None:
            witness.check_database(self.backend.database_dir(engine))
        # What this process folded and sent: the chain's value at a position (ahead of
        # the last head sent when heads are batched), guarded for threads sharing a log.
        self._witness_lock = threading.Lock()
        self._witness_point: ChainPoint | None = None
        self._witnessed = 0
        self._unwitnessed = 0
        self._committed = 0  # the highest position this process committed
        self._witnessed_at: datetime | None = None

    def transaction(self) -> AbstractContextManager[sa.Connection]:
        """A write transaction (holding the process lock for a shared connection).

        It is one that may append before it writes anything (on PostgreSQL it is marked
        so, ``pg_writes.mark_appending``, and readers wait for it if it does). With a
        witness, events it appended (``append_in``) are witnessed once it commits."""
        if self.read_only:
            self._refuse_write()
        if self.witness is None:
            return self._connections.transaction()
        return self._witnessed_transaction()

    def _refuse_write(self) -> AbstractContextManager[sa.Connection]:
        raise ReadOnlyLedger("this ledger is open read-only (a read replica): writes go"
                             " to the primary; nothing was written")

    @contextmanager
    def _witnessed_transaction(self) -> Iterator[sa.Connection]:
        recorded: list[RecordedEvent] = []
        with self._connections.transaction() as conn:
            conn.info[_WITNESS_PENDING] = recorded
            try:
                yield conn
            finally:
                conn.info.pop(_WITNESS_PENDING, None)
        if recorded:
            try:
                self._witness_after_commit(recorded)
            except WitnessError as exc:
                raise WitnessError(
                    f"appended at positions {_span([e.position for e in recorded])}, but"
                    f" {exc}: the head goes out with the next append") from None

    def connection(self) -> AbstractContextManager[sa.Connection]:
        """A read connection: on SQLite its transactions are deferred, so readers run
        beside a writer (WAL) instead of taking the write lock."""
        return self._connections.connection()

    def prepare(self, stream_id: str, batch: Sequence[EventInput]) -> list[PreparedEvent]:
        """Validate a batch before touching the database; raises on the first bad event."""
        check_stream_id(stream_id)
        # Imported by the first write: validation builds the catalog's pydantic models,
        # which a read-only process (``ctxledger state``) never needs.
        from ctxledger.store.validate import coerce_new_event, validate_event

        prepared: list[PreparedEvent] = []
        seen: set[str] = set()
        for index, raw in enumerate(batch):
            try:
                event = coerce_new_event(raw)
                normalized, data_json, meta_json = validate_event(stream_id, event,
                                                                  self.max_event_bytes)
                if self.check is not None:
                    self.check(stream_id, normalized)
            except EventValidationError as exc:
                where = f"event {index + 1}: " if len(batch) > 1 else ""
                raise BatchEventError(f"{where}{exc}", index=index, reason=str(exc)) from None
            assert normalized.event_id is not None
            if normalized.event_id in seen:
                raise EventValidationError(f"event id {normalized.event_id} appears twice")
            seen.add(normalized.event_id)
            prepared.append(PreparedEvent(normalized, data_json, meta_json,
                                          client_id=event.event_id is not None))
        if not prepared:
            raise EventValidationError("nothing to append: the batch is empty")
        return prepared

    def append(self, stream_id: str, batch: Sequence[EventInput],
               expected_version: int | None = None) -> AppendResult:
        """Append ``batch`` atomically to ``stream_id``.

        ``expected_version``: None appends at any version, 0 requires a new stream,
        N requires the stream to be exactly at N (else ``ConcurrencyError``).
        """
        if expected_version is not None and (
            isinstance(expected_version, bool)  # True would pass as version 1
            or not isinstance(expected_version, int) or expected_version < 0
        ):
            raise EventValidationError("expected_version must be None or an integer >= 0")
        prepared = self.prepare(stream_id, batch)
        shared = self._shared_keys(stream_id, prepared)
        try:
            # Unmarked: append_in_transaction marks it in the same statement as its locks.
            with self._append_transaction() as conn:
                outcome = append_in_transaction(
                    conn, stream_id, prepared, expected_version, self.clock(), self.heads,
                    key=self.chain_key, shared_keys=shared)
                if outcome.recorded and self.in_transaction is not None:
                    self.in_transaction(conn, outcome.recorded)
                sealed = self._seal_if_due(conn, outcome.recorded)
        except sa.exc.OperationalError as exc:
            raise LedgerError(f"database error while appending: {exc.orig}") from None
        if outcome.head is not None:
            # Only now: a head is cached once the transaction that wrote it has committed.
            self.heads.remember(stream_id, outcome.head)
        if sealed is not None:
            self._sealed_upto = sealed.position
        if self.witness is not None and outcome.recorded:
            try:
                self._witness_after_commit(outcome.recorded)
            except WitnessError as exc:
                raise WitnessError(
                    f"appended at positions {_span(outcome.result.positions)}, but {exc}:"
                    " the head goes out with the next append", outcome.result) from None
        return outcome.result

    def append_in(self, conn: sa.Connection, stream_id: str, batch: Sequence[EventInput],
                  expected_version: int | None = None, *,
                  recorded_at: datetime | None = None) -> AppendResult:
        """Append ``batch`` inside the caller's write transaction on ``conn`` (from
        ``transaction()``), with the same validation and inline hook as ``append``.

        For jobs that write their own rows and an event atomically. The head cache is
        neither read nor fed: the caller's transaction may still roll back.
        ``recorded_at`` (default: the clock) is for copies that keep their original time.
        """
        if self.read_only:
            self._refuse_write()
        prepared = self.prepare(stream_id, batch)
        outcome = append_in_transaction(conn, stream_id, prepared, expected_version,
                                        self.clock() if recorded_at is None else recorded_at,
                                        shared_keys=self._shared_keys(stream_id, prepared))
        if outcome.recorded and self.in_transaction is not None:
            self.in_transaction(conn, outcome.recorded)
        pending = conn.info.get(_WITNESS_PENDING)
        if pending is not None:
            pending.extend(outcome.recorded)
        return outcome.result

    def _shared_keys(self, stream_id: str, prepared: Sequence[PreparedEvent]) -> Sequence[str]:
        if self.shared_keys is None:
            return ()
        return self.shared_keys(stream_id, [p.event for p in prepared])

    def _seal_if_due(self, conn: sa.Connection, recorded: Sequence[RecordedEvent]
                     ) -> Seal | None:
        """Seal in the append's own transaction once ``seal_settings.every`` events are
        unsealed: the append already holds the write lock, so this costs only the fold.
        The last seal's position is remembered, so other appends do not query for it."""
        every = self.seal_settings.every
        if every is None or not recorded:
            return None
        last = recorded[-1].position
        known = self._sealed_upto
        if known is not None and last - known < every:
            return None
        current = last_seal(conn)
        upto = current.position if current is not None else 0
        key = self.chain_key
        if last - upto < every:
            self._sealed_upto = upto
            return None
        if current is not None and current.key_id is not None and (
                key is None or key.key_id != current.key_id):
            self._sealed_upto = last  # keyed with another key: ``seal`` reports it
            return None
        # Other appends may be in flight (PostgreSQL): seal only what none of them can
        # still fill, and leave it to the append already sealing, if any (never wait on it).
        if not self.backend.try_lock(conn, locks.SEAL):
            return None
        return seal_in_transaction(conn, recorded[-1].recorded_at, key,
                                   upto=self.backend.settled_position(conn))

    # -- the witness ---------------------------------------------------------------------

    def _witness_after_commit(self, recorded: Sequence[RecordedEvent]) -> None:
        """Send the head once the settings say it is due (the events are committed)."""
        settings = self.witness_settings
        with self._witness_lock:
            self._unwitnessed += len(recorded)
            self._committed = max(self._committed, recorded[-1].position)
            point = self._witness_point
            current = (point is not None and not self.backend.concurrent_appends
                       and point.position == recorded[0].position - 1)
            if current:
                assert point is not None
                # One writer at a time and nothing committed between: the append's own
                # links extend the chain, and that is a committed prefix: no read needed.
                self._witness_point = extend_chain(
                    point, ((e.position, e.hash) for e in recorded), self.chain_key)
            now = self.clock()
            every, interval = settings.every, settings.interval_ms
            due = (every is not None and self._unwitnessed >= every) or (
                interval is not None and (
                    self._witnessed_at is None
                    or (now - self._witnessed_at).total_seconds() * 1000 >= interval))
            if due:
                self._send_head(now, read=not current)

    def flush_witness(self) -> Head | None:
        """Send the head now if events are unwitnessed (``close`` does this); the head
        sent, or None when there was nothing new or no witness."""
        if self.witness is None:
            return None
        with self._witness_lock:
            return self._send_head(self.clock())

    def _send_head(self, now: datetime, *, read: bool = True) -> Head | None:
        assert self.witness is not None
        point = self._witness_point
        if not read and point is not None:
            return self._record_head(point, now)
        with self.connection() as conn:
            # Only positions no open transaction can still fill: a head must never be
            # contradicted by an honest commit that lands below it later.
            upto = self.backend.settled_position(conn)
            if point is None:
                last = last_seal(conn)
                point = (ChainPoint(last.position, last.hash, last.events) if last is not None
                         else ChainPoint(0, GENESIS_HASH, 0))
            if upto > point.position:
                (point,) = fold_chain(conn, [(upto, self.chain_key)], start=point)
        self._witness_point = point
        return self._record_head(point, now)

    def _record_head(self, point: ChainPoint, now: datetime) -> Head | None:
        assert self.witness is not None
        if point.position <= self._witnessed:
            self._unwitnessed = 0
            return None
        key = self.chain_key
        head = Head(point.position, point.events, point.hash,
                    key.key_id if key is not None else None, format_utc(now))
        self.witness.record(head)
        self._witnessed, self._unwitnessed, self._witnessed_at = point.position, 0, now
        return head

    def close_witness(self) -> None:
        """Send what is unwitnessed, then release the witness."""
        if self.witness is None:
            return
        try:
            if self._committed > self._witnessed:
                self.flush_witness()
        finally:
            self.witness.close()

    def seal(self) -> Seal | None:
        """Seal every event up to the head (None when nothing is new since the last seal).

        Uses ``CTXLEDGER_CHAIN_KEY`` as it is now."""
        with self.transaction() as conn:
            sealed = seal_in_transaction(conn, self.clock(), chain_key_from_env())
        if sealed is not None:
            self._sealed_upto = sealed.position
        return sealed

    def anchor(self) -> Anchor:
        """Seal, then return the last seal to keep outside the database."""
        self.seal()
        with self.connection() as conn:
            last = last_seal(conn)
        if last is None:
            raise LedgerError("nothing to anchor: the log is empty")
        return Anchor.of(last)

    def read_stream(self, stream_id: str, from_version: int = 1,
                    to_version: int | None = None) -> list[RecordedEvent]:
        """Events of one stream between two versions (inclusive)."""
        with self.connection() as conn:
            return _read.read_stream(conn, stream_id, from_version, to_version)

    def read_all(self, after: int = 0, limit: int | None = None, *,
                 until_position: int | None = None,
                 until_time: datetime | None = None) -> list[RecordedEvent]:
        """Events after ``after`` in position order, stopping at a position or time.

        On PostgreSQL it also stops before any position a transaction still in progress
        holds (``Backend.tail_limit``): tailing by position never skips an event that
        commits late."""
        with self.connection() as conn:
            until_position = self.backend.tail_limit(conn, until_position)
            return list(_read.read_all(conn, after, limit, until_position=until_position,
                                       until_time=until_time))

    def settled_position(self) -> int:
        """The highest position a follower may read up to: on PostgreSQL, below every
        append still in progress (``Backend.settled_position``); on SQLite the head."""
        with self.connection() as conn:
            return self.backend.settled_position(conn)

    def replay_lag(self) -> float | None:
        """Seconds this database (a read replica) is behind its primary; None when it is
        no replica (``Backend.replay_lag``)."""
        with self.connection() as conn:
            return self.backend.replay_lag(conn)

    def head_position(self) -> int:
        """The highest position written (0 for an empty log)."""
        with self.connection() as conn:
            return _read.head_position(conn)

    def position_at(self, when: datetime) -> int:
        """The last position recorded at or before ``when``."""
        with self.connection() as conn:
            return _read.position_at(conn, when)

    def stream_version(self, stream_id: str) -> int:
        """The current version of a stream (0 if it does not exist)."""
        with self.connection() as conn:
            return stream_head(conn, stream_id)[0]

    def verify(self, progress: object | None = None, *,
               anchor: Anchor | None = None) -> VerifyReport:
        """Recompute every stream chain and the global chain at every seal, check the
        immutability triggers, and with ``anchor`` prove that the log still extends it.

        ``CTXLEDGER_CHAIN_KEY`` is read now: with it, links must be HMACs under it."""
        key = chain_key_from_env()
        with self.connection() as conn:
            seals = list_seals(conn)
            # Links made with a key this run lacks cannot be checked one by one: the seals
            # check says so in one line instead of one mismatch per event.
            unverifiable = any(s.key_id is not None and (key is None or s.key_id != key.key_id)
                               for s in seals)
            report = verify_log(conn, progress=progress, key=key,
                                check_hashes=not unverifiable)
            report.problems.extend(check_seals(conn, key))
            report.seals = len(seals)
            report.sealed_position = seals[-1].position if seals else 0
            if anchor is not None:
                found = check_anchor(conn, anchor, key)
                report.anchor = "broken" if found else "ok"
                report.problems.extend(found)
            if self.witness is not None:
                self._check_witness(conn, report, key)
        return report

    def _check_witness(self, conn: sa.Connection, report: VerifyReport,
                       key: ChainKey | None) -> None:
        assert self.witness is not None
        try:
            heads = self.witness.heads()
        except WitnessError as exc:
            report.witness = "unreadable"
            report.problems.append(str(exc))
            return
        if not heads:
            report.witness = "no head yet"
            return
        found = check_heads(conn, heads, key)
        report.witness = "broken" if found else "ok"
        report.witnessed_position = max(h.position for h in heads)
        report.problems.extend(found)


def _span(positions: Sequence[int]) -> str:
    return (str(positions[0]) if len(positions) == 1
            else f"{positions[0]}..{positions[-1]}")
