"""PostgreSQL appends without a table lock: writers on different streams run side by side.

``LOCK TABLE events IN EXCLUSIVE MODE`` held through commit made insert order equal commit
order, but it also queued every writer behind the one fsyncing. Instead:

- **Per stream**: ``pg_advisory_xact_lock`` on a hash of the stream id (and of each
  client-supplied event id, and of any row a projection updates across streams, see
  ``Projection.shared_keys``), held to commit. Version checks, stream rules and
  idempotency are decided under it, as they were under the table lock.
- **Positions**: one statement takes a short session-level advisory lock (``G``), has
  the transaction's id assigned, inserts the batch (consecutive positions) and releases
  ``G``. ``G`` is held for that one statement, never through commit.
- **Commit order for readers**: each event stores ``txid``, the transaction id assigned
  inside ``G``. Ids and positions are handed out in the same order under ``G``, so an
  event whose ``txid`` is below the id of every *other* append still in progress has
  only ended transactions (or the reader's own) before it. Appends are told apart from
  other transactions by a shared advisory lock they take before they have an id and
  hold to the end (``APPENDING``; ``EventLog.transaction`` takes it first thing);
  ``settled_position`` reads them from ``pg_locks``. ``settled_position`` is the highest
  such position: a reader that stops there never skips a late commit. A transaction
  that already had an id before its append (``append_in`` after other writes, two
  appends in one transaction) stores instead a value above every id handed out before
  its insert (``_FLOOR``), which keeps both properties.

Rolled-back inserts leave holes in the positions, as before; seals cover them. SQLite
keeps its single writer (``BEGIN IMMEDIATE``); nothing here runs on it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from ctxledger.store.backends.locks import APPENDING, POSITIONS

# The marker first, then each key in the order given.
_LOCK_KEYS = (
    "SELECT count(pg_advisory_xact_lock(hashtextextended("
    "current_schema() || chr(31) || t.k, 0))) "
    "FROM (SELECT pg_advisory_xact_lock_shared(%(appending)s::integer,"
    " hashtext(current_schema())) AS marker) AS m,"
    " unnest(%(keys)s::text[]) WITH ORDINALITY AS t(k, n)"
)

_ROWS = (
    "unnest(%(v)s::integer[], %(id)s::text[], %(t)s::text[], %(sv)s::integer[],"
    " %(d)s::text[], %(m)s::text[], %(ph)s::text[], %(h)s::text[])"
    " WITH ORDINALITY AS r(v, id, t, sv, d, m, ph, h, n)"
)
_COLUMNS = ("INSERT INTO events (stream_id, stream_version, event_id, type, schema_version,"
            " data, metadata, recorded_at, prev_hash, hash, txid)")
_VALUES = ("%(stream_id)s::text, r.v, r.id, r.t, r.sv, r.d, r.m, %(recorded_at)s::timestamptz,"
           " r.ph, r.h")
# The cached head is still the head: (version - 1, prev_hash) exists and nothing follows.
_GUARD = (
    "(NOT %(guarded)s::boolean OR (EXISTS (SELECT FROM events p"
    " WHERE p.stream_id = %(stream_id)s::text AND p.stream_version = %(v0)s::integer - 1"
    " AND p.hash = %(prev0)s::text)"
    " AND NOT EXISTS (SELECT FROM events p WHERE p.stream_id = %(stream_id)s::text"
    " AND p.stream_version >= %(v0)s::integer)))"
)
_G = "%(g)s::integer, hashtext(current_schema())"

# One round trip: take G, have the id assigned (after G, so ids follow positions), insert,
# release G once every row is in (the outer SELECT reads the aggregate of all of them).
_INSERT_FAST = (
    "WITH g AS MATERIALIZED (SELECT pg_advisory_lock(" + _G + ") AS locked,"
    " pg_current_xact_id_if_assigned() IS NOT NULL AS had_xid),"
    " ins AS (" + _COLUMNS + " SELECT " + _VALUES + ", pg_current_xact_id()::text::bigint"
    " FROM g, " + _ROWS + " WHERE NOT g.had_xid AND " + _GUARD + " ORDER BY r.n"
    " RETURNING position)"
    " SELECT a.positions, g.had_xid, pg_advisory_unlock(" + _G + ")"
    " FROM (SELECT array_agg(position ORDER BY position) AS positions FROM ins) AS a, g"
)
# For a transaction that already had an id: its own id may be older than ids others took
# under G since, so it stores the highest id handed out before its insert: among those
# still running (_FLOOR, read inside G) and those ended (below the snapshot's xmax).
_INSERT_SLOW = (
    _COLUMNS + " SELECT " + _VALUES + ", greatest(%(floor)s::bigint,"
    " pg_snapshot_xmax(pg_current_snapshot())::text::bigint - 1)"
    " FROM " + _ROWS + " WHERE " + _GUARD + " ORDER BY r.n RETURNING position"
)

# 64-bit ids of the transactions holding their id lock (pg_locks gives 32 bits: widened
# to the nearest value around the snapshot's xmax), read once, at one instant.
_RUNNING = (
    "m AS (SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint AS xmax),"
    " locks AS MATERIALIZED (SELECT locktype, mode, granted, pid, transactionid, database,"
    " classid, objid, objsubid FROM pg_locks),"
    " xids AS (SELECT l.pid, m.xmax + ((l.transactionid::text::bigint - m.xmax)"
    " %% 4294967296 + 6442450944) %% 4294967296 - 2147483648 AS x FROM locks AS l, m"
    " WHERE l.locktype = 'transactionid' AND l.mode = 'ExclusiveLock' AND l.granted)"
)
# A reader's limit (see settled_position): below every *other* append in progress in this
# schema, and below any id handed out after the lock table was read (above every id
# running then, and the statement snapshot's xmax, taken before that read). A standby's
# pg_locks holds none of the primary's transactions: there the limit is the xmin of its
# own snapshot, below every primary transaction its replay has not seen end (appends
# or not: it cannot tell them apart).
_LIMIT = (
    "WITH " + _RUNNING + " SELECT CASE WHEN pg_is_in_recovery()"
    " THEN pg_snapshot_xmin(pg_current_snapshot())::text::bigint ELSE least("
    "(SELECT min(x) FROM xids WHERE pid <> pg_backend_pid() AND pid IN ("
    "SELECT pid FROM locks WHERE locktype = 'advisory' AND granted"
    " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
    " AND classid = %(appending)s::integer::oid"
    " AND objid = hashtext(current_schema())::oid AND objsubid = 2)),"
    " greatest(m.xmax, (SELECT max(x) + 1 FROM xids))) END FROM m"
)
# Run in a later statement than _LIMIT (a later snapshot): every append that had an id
# below the limit and was in progress then has ended and is visible now.
_SETTLED = (
    "SELECT coalesce(max(position), 0) FROM events"
    " WHERE coalesce(txid, 0) < %(limit)s::bigint"
)
# The slow path's floor: its own id and every id running now (read inside G, before its
# insert): with the snapshot's last ended id, no earlier position has a higher txid.
_FLOOR = ("WITH " + _RUNNING
          + " SELECT greatest(pg_current_xact_id()::text::bigint, max(x)) FROM xids")


def _cursor(conn: sa.Connection) -> Any:
    return conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]


def mark_appending(conn: sa.Connection) -> None:
    """Mark this transaction as one that may append, before it has an id (see
    ``APPENDING``): a write transaction that appends after other writes calls it first."""
    _cursor(conn).execute(
        "SELECT pg_advisory_xact_lock_shared(%(appending)s::integer, hashtext(current_schema()))",
        {"appending": APPENDING})


def stream_key(stream_id: str) -> str:
    """The lock key of a stream (event ids and projection keys use other prefixes)."""
    return f"stream\x1f{stream_id}"


def event_key(event_id: str) -> str:
    """The lock key of a client-supplied event id."""
    return f"event\x1f{event_id}"


def lock_for_batch(conn: sa.Connection, stream_id: str, keys: Sequence[str] = ()) -> None:
    """Take the stream's lock, then ``keys`` in sorted order, until the transaction ends.

    Every writer takes its stream first and the rest sorted, so two appends wait for
    each other instead of deadlocking.
    """
    ordered = [stream_key(stream_id), *sorted(set(keys))]
    _cursor(conn).execute(_LOCK_KEYS, {"keys": ordered, "appending": APPENDING})


def insert_rows(conn: sa.Connection, rows: Sequence[dict[str, Any]],
                guarded: bool) -> list[int] | None:
    """Insert the rows of one batch (one stream, one ``recorded_at``) at consecutive
    positions; their positions, or None when ``guarded`` and the cached head was stale.

    The caller holds the stream's lock (``lock_for_batch``).
    """
    first = rows[0]
    params: dict[str, Any] = {
        "g": POSITIONS, "stream_id": first["stream_id"],
        "recorded_at": first["recorded_at"], "guarded": guarded,
        "v0": first["stream_version"], "prev0": first["prev_hash"],
        "v": [r["stream_version"] for r in rows], "id": [r["event_id"] for r in rows],
        "t": [r["type"] for r in rows], "sv": [r["schema_version"] for r in rows],
        "d": [r["data"] for r in rows], "m": [r["metadata"] for r in rows],
        "ph": [r["prev_hash"] for r in rows], "h": [r["hash"] for r in rows],
    }
    cursor = _cursor(conn)
    try:
        cursor.execute(_INSERT_FAST, params)
        found, had_xid, _ = cursor.fetchone()
        if had_xid:
            cursor.execute("SELECT pg_advisory_lock(" + _G + ")", params)
            cursor.execute(_FLOOR, {"appending": APPENDING})  # parameters: %% is unescaped
            params["floor"] = int(cursor.fetchone()[0])
            cursor.execute(_INSERT_SLOW, params)
            found = sorted(int(p) for (p,) in cursor.fetchall()) or None
            cursor.execute("SELECT pg_advisory_unlock(" + _G + ")", params)
    except BaseException:
        # G is a session lock and the failed transaction cannot release it: dropping the
        # connection does (the caller's transaction is lost either way).
        conn.invalidate()
        raise
    if not found:
        return None
    positions = [int(p) for p in found]
    if positions != list(range(positions[0], positions[0] + len(rows))):
        raise RuntimeError(f"positions of a batch are not consecutive: {positions}")
    return positions


HOLD_APPENDS_TIMEOUT_MS = 30_000
"""How long ``hold_appends`` waits for the appends in progress before it fails."""

PREFIX_SPAN = 10_000
"""How far below its head a snapshot is searched for the last event before every
transaction it saw running; further down, the snapshot is not taken as a prefix."""

# In a REPEATABLE READ snapshot: ``low``, the highest position whose event was stored by
# a transaction that had ended when the snapshot was taken (txid below its xmin: ids
# follow positions, and a slow-path id is a floor above every earlier one, so an append
# still running then holds only positions above it); then whether every position from
# there to the head is in the snapshot. A missing one was taken by an append that was in
# flight (or rolled back: a hole for good, which only costs a retry).
_PREFIX = (
    "WITH head AS (SELECT coalesce(max(position), 0) AS h FROM events),"
    " low AS (SELECT (SELECT e.position FROM events AS e, head"
    " WHERE e.position > head.h - %(span)s::bigint"
    " AND coalesce(e.txid, 0) < pg_snapshot_xmin(pg_current_snapshot())::text::bigint"
    " ORDER BY e.position DESC LIMIT 1) AS l)"
    " SELECT CASE WHEN head.h = 0 THEN true WHEN low.l IS NULL THEN"
    " head.h <= %(span)s::bigint AND (SELECT count(*) FROM events) = head.h"
    " ELSE (SELECT count(*) FROM events AS e WHERE e.position > low.l) = head.h - low.l"
    " END FROM head, low"
)


def snapshot_is_prefix(conn: sa.Connection) -> bool:
    """Whether the REPEATABLE READ snapshot ``conn`` reads holds every event below its
    head: no append that took an earlier position was still in flight when it was taken.

    Appends commit out of position order, so a snapshot can hold a position and miss an
    earlier one that commits later; what is derived from it would then differ from a
    replay up to its head. The check reads only the positions above the last one stored
    before every transaction the snapshot saw running (usually a handful).
    """
    cursor = _cursor(conn)
    cursor.execute(_PREFIX, {"span": PREFIX_SPAN})
    return bool(cursor.fetchone()[0])


def hold_appends(conn: sa.Connection) -> None:
    """Take ``APPENDING`` exclusively until ``conn``'s transaction ends: waits for every
    append in progress in this schema to end and holds new ones back meanwhile."""
    cursor = _cursor(conn)
    # An append left open for this long is a bug of its caller: fail, do not hang.
    cursor.execute(f"SET LOCAL lock_timeout = '{HOLD_APPENDS_TIMEOUT_MS}ms'")
    cursor.execute(
        "SELECT pg_advisory_xact_lock(%(appending)s::integer, hashtext(current_schema()))",
        {"appending": APPENDING})


def settled_position(conn: sa.Connection) -> int:
    """The highest position below which no transaction can still commit an event.

    Every event up to it is committed (or its position is a hole for good); a reader
    that reads only up to it never skips an event that commits later. On a hot standby
    too: there it waits for every transaction of the primary still open in the replayed
    log, appends or not.
    """
    cursor = _cursor(conn)
    cursor.execute(_LIMIT, {"appending": APPENDING})
    limit = int(cursor.fetchone()[0])
    cursor.execute(_SETTLED, {"limit": limit})
    return int(cursor.fetchone()[0])

