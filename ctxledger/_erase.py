"""``Ledger.erase``: one session's or one scope's content made unrecoverable.

The order matters: in one write transaction, holding only the erased streams' locks, the
``erasure.completed`` record is appended, the events are blanked (``store.erase``), the
token caches are emptied and each projection forgets what the erased streams left in it
(``Projection.forget_streams``: their rows go, aggregates are counted again), so the
tables equal a rebuild at a cost of the erased events, not of the log; after the commit
the backend scrubs the files it wrote (``Backend.scrub``). See docs/erasure.md.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from ctxledger.projections.base import metadata as projection_metadata
from ctxledger.projections.scope_members import scope_members
from ctxledger.projections.session_stats import sessions
from ctxledger.projections.token_cache import history_token_memo, token_counts
from ctxledger.store.append import append_in_transaction
from ctxledger.store.backends import backend_for
from ctxledger.store.canonical import canonical_json
from ctxledger.store.erase import (
    ERASURE_TYPE,
    ErasedRow,
    attestation_digest,
    blank_rows,
    live_rows,
)
from ctxledger.store.errors import EventValidationError, InvalidArgument
from ctxledger.store.hash_chain import ERASED_TYPE
from ctxledger.store.printable import unprintable_problem
from ctxledger.store.read import read_where
from ctxledger.store.records import NewEvent, PreparedEvent, RecordedEvent
from ctxledger.store.schema import events
from ctxledger.store.streams import SCOPE_PREFIX, SYSTEM_STREAM, check_stream_id, stream_kind
from ctxledger.store.validate import new_event_id

if TYPE_CHECKING:
    from ctxledger.projections.runner import ProjectionRunner
    from ctxledger.store.clock import Clock
    from ctxledger.store.log import EventLog

MAX_REASON = 1_000
"""Characters a reason may have: it is a note for an auditor, not a document."""

Progress = Callable[[int, int], None]


@dataclass(frozen=True, slots=True)
class ErasureReport:
    """What ``Ledger.erase`` did."""

    target: str
    """``session`` or ``scope``."""
    name: str
    reason: str
    streams: list[str]
    events: int
    """Events blanked now (0 when everything was erased before: nothing is written)."""
    position: int | None
    """Where the ``erasure.completed`` record is (None when nothing was erased)."""
    erased_at: datetime

    def to_json(self) -> dict[str, Any]:
        """JSON-ready data."""
        from ctxledger.store.clock import format_utc

        return {"target": self.target, "name": self.name, "reason": self.reason,
                "streams": self.streams, "events": self.events, "position": self.position,
                "erased_at": format_utc(self.erased_at)}


def _check_reason(reason: object) -> str:
    if not isinstance(reason, str) or not reason.strip():
        raise InvalidArgument("erase needs a reason (--reason): say why, for the record")
    if len(reason) > MAX_REASON:
        raise InvalidArgument(f"the reason is longer than {MAX_REASON} characters")
    problem = unprintable_problem(reason)
    if problem is not None:
        raise InvalidArgument(f"the reason contains {problem}")
    return reason


def target_streams(conn: sa.Connection, session: str | None, scope: str | None
                   ) -> tuple[str, str, list[str]]:
    """(target, name, streams) of an erase of ``session`` or ``scope``; bad input raises
    ``InvalidArgument``."""
    if (session is None) == (scope is None):
        raise InvalidArgument("erase needs exactly one of --session and --scope")
    name = session if session is not None else scope
    assert name is not None
    try:
        check_stream_id(name if session is not None else SCOPE_PREFIX + name)
    except EventValidationError as exc:
        raise InvalidArgument(str(exc)) from None
    exists = sa.select(events.c.position).where(events.c.stream_id == sa.bindparam("s")
                                                ).limit(1)
    if session is not None:
        if stream_kind(session) != "session" or conn.execute(
                exists, {"s": session}).first() is None:
            raise InvalidArgument(f"unknown session {session!r}")
        return "session", session, with_forks(conn, [session])
    found = sorted({str(r.stream_id) for r in conn.execute(
        sa.select(scope_members.c.stream_id).where(scope_members.c.scope == scope))})
    # Sessions already erased left scope_members with the rebuild: their record lists them.
    for row in conn.execute(sa.select(events.c.data).where(
            events.c.stream_id == SYSTEM_STREAM, events.c.type == ERASURE_TYPE)):
        data = json.loads(row.data)
        if data.get("target") == "scope" and data.get("name") == scope:
            found = sorted({*found, *data.get("streams", [])})
    stream = SCOPE_PREFIX + str(scope)
    if conn.execute(exists, {"s": stream}).first() is not None:
        found = sorted({*found, stream})
    if not found:
        raise InvalidArgument(f"unknown scope {scope!r}")
    return "scope", str(scope), with_forks(conn, found)


def with_forks(conn: sa.Connection, streams: list[str]) -> list[str]:
    """``streams`` and every session forked from one of them, and from those forks, in
    order: a fork holds copies of the content it was forked from, so it goes with it."""
    found = set(streams)
    frontier = set(streams)
    while frontier:
        forks = {str(r.stream_id) for r in conn.execute(
            sa.select(sessions.c.stream_id).where(sessions.c.forked_from.in_(
                sorted(frontier))))} - found
        found |= forks
        frontier = forks
    return sorted(found)


def erase(log: EventLog, runner: ProjectionRunner, clock: Clock, *, session: str | None,
          scope: str | None, reason: str, progress: Progress | None = None) -> ErasureReport:
    """See ``Ledger.erase`` (which also forgets its memos afterwards)."""
    reason = _check_reason(reason)
    position: int | None = None
    changed: list[str] = []
    with log.transaction() as conn:
        target, name, streams = target_streams(conn, session, scope)
        backend = backend_for(conn)
        backend.check_scrub(conn)
        # Appends to these streams wait for the erase; other streams' appends go on.
        for stream in streams:
            backend.lock_append(conn, stream, [], ())
        rows = live_rows(conn, streams)
        now = clock()
        if rows:
            with backend.erasing(conn):
                position, changed = _blank(log, runner, conn, now, target, name, reason,
                                           streams, rows, progress)
    log.heads.forget(SYSTEM_STREAM)
    # Erasing again writes nothing but scrubs again (every table that may hold content):
    # the first scrub may have been stopped by an old transaction (PostgreSQL) or a
    # busy reader (SQLite).
    backend_for(log.engine).scrub(
        log.engine, changed or ["events", *sorted(projection_metadata.tables)])
    return ErasureReport(target, name, reason, streams, len(rows), position, now)


def _blank(log: EventLog, runner: ProjectionRunner, conn: sa.Connection, now: datetime,
           target: str, name: str, reason: str, streams: list[str], rows: list[ErasedRow],
           progress: Progress | None) -> tuple[int, list[str]]:
    """Record the erasure, blank ``rows``, forget them in the caches and projections;
    returns the record's position and the tables written."""
    scopes = sorted({str(r.scope) for r in conn.execute(
        sa.select(scope_members.c.scope).where(scope_members.c.stream_id.in_(streams)))}
        | ({name} if target == "scope" else set()))
    types: dict[str, int] = {}
    for row in rows:
        types[row.type] = types.get(row.type, 0) + 1
    data = {
        "target": target, "name": name, "reason": reason, "streams": streams,
        "scopes": scopes, "events": len(rows), "types": dict(sorted(types.items())),
        "positions": [row.position for row in rows],
        "digest": attestation_digest((r.position, r.event_id, r.hash) for r in rows),
    }
    # Projections behind the log would fold the erased events' figures again later:
    # brought to the head first (they are, unless one was left to catch up).
    if any(s.behind or s.needs_rebuild for s in runner.status(conn)):
        runner.bring_up_to_date(conn)
    # What the projections need to forget the erased events, read before they go.
    erased = _erased_content(conn, streams, runner.erased_content())
    record = NewEvent(type=ERASURE_TYPE, data=data, event_id=new_event_id(),
                      metadata={}, schema_version=1)
    # Written here, not through ``EventLog.prepare``: the catalog refuses this type from
    # any other writer, so an erasure cannot be forged through an append.
    outcome = append_in_transaction(
        conn, SYSTEM_STREAM, [PreparedEvent(record, canonical_json(data), "{}", False)],
        None, now, key=log.chain_key)
    total = len(rows) + 1
    blank_rows(conn, rows, str(record.event_id),
               progress=None if progress is None else lambda done: progress(done, total))
    # Counts cached by content hash: a hash of a short text can be guessed.
    conn.execute(token_counts.delete())
    for start in range(0, len(streams), 500):
        conn.execute(history_token_memo.delete().where(
            history_token_memo.c.stream_id.in_(streams[start:start + 500])))
    changed = runner.forget_streams(conn, streams, erased, types)
    if progress is not None:
        progress(total, total)
    return outcome.result.positions[0], ["events", token_counts.name,
                                         history_token_memo.name, *sorted(changed)]


def _erased_content(conn: sa.Connection, streams: list[str],
                    types: frozenset[str]) -> list[RecordedEvent]:
    """The live events of ``streams`` of ``types``, as they are before the erasure."""
    if not types:
        return []
    found: list[RecordedEvent] = []
    for start in range(0, len(streams), 500):
        found.extend(read_where(conn, sa.and_(
            events.c.stream_id.in_(streams[start:start + 500]),
            events.c.type.in_(sorted(types)))))
    return found


__all__ = ["ERASED_TYPE", "ErasureReport", "erase", "target_streams"]
