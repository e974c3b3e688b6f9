"""Projection checkpoints: the last position applied, stored beside the projection's rows.

On PostgreSQL, appends on different streams run concurrently, and one checkpoint row
updated by every append would queue them all on its row lock until each commits. Inline
appends there advance a *lane* instead (``projection_checkpoint_lanes``, one of
``LANES`` chosen by stream), and a checkpoint's position is the highest of its row and
its lanes (``read_marks``). Rebuild and catch-up, which hold the log still, write the row
and clear the lanes. SQLite writes the row only.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa

from ctxledger.projections.base import metadata
from ctxledger.store.engine import driver_cursor, driver_statement
from ctxledger.store.schema import PositionType, UTCDateTime

checkpoints = sa.Table(
    "projection_checkpoints",
    metadata,
    sa.Column("name", sa.String(100), primary_key=True),
    sa.Column("version", sa.Integer, nullable=False),
    sa.Column("position", PositionType, nullable=False),
    sa.Column("updated_at", UTCDateTime, nullable=False),
)

checkpoint_lanes = sa.Table(
    "projection_checkpoint_lanes",
    metadata,
    sa.Column("name", sa.String(100), primary_key=True),
    sa.Column("lane", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("position", PositionType, nullable=False),
    sa.Column("updated_at", UTCDateTime, nullable=False),
)
"""Inline advances on PostgreSQL, per (projection, lane); see the module docstring."""

LANES = 256
"""Writers on two streams share a lane row (and wait for each other) once in this many."""


def lane_of(stream_id: str) -> int:
    """The lane of a stream's inline advances (stable across processes)."""
    return zlib.crc32(stream_id.encode()) % LANES


@dataclass(frozen=True, slots=True)
class Mark:
    """One projection's checkpoint: its version, position and when it last moved."""

    version: int
    position: int
    updated_at: datetime



def _advance_statement(names: tuple[str, ...]) -> sa.Update:
    """One UPDATE moving every named checkpoint that is behind ``position`` to it."""
    position = sa.bindparam("position", type_=checkpoints.c.position.type, required=False)
    now = sa.bindparam("now", type_=checkpoints.c.updated_at.type, required=False)
    # The names are fixed per runner: rendered into the SQL, only the position and the
    # time are bound on each append.
    listed = sa.bindparam("names", value=list(names), type_=checkpoints.c.name.type,
                          literal_execute=True)
    return (checkpoints.update()
            .where(checkpoints.c.name.in_(listed), checkpoints.c.position < position)
            .values(position=position, updated_at=now))


def read_marks(conn: sa.Connection) -> dict[str, Mark]:
    """name -> ``Mark`` for every stored checkpoint, lanes included."""
    marks = {r.name: Mark(int(r.version), int(r.position), r.updated_at)
             for r in conn.execute(sa.select(checkpoints))}
    if conn.dialect.name == "postgresql":
        top = sa.text("SELECT DISTINCT ON (name) name, position, updated_at"
                      " FROM projection_checkpoint_lanes ORDER BY name, position DESC"
                      ).columns(checkpoint_lanes.c.name, checkpoint_lanes.c.position,
                                checkpoint_lanes.c.updated_at)
        for name, position, updated_at in conn.execute(top):
            mark = marks.get(name)
            if mark is not None and int(position) > mark.position:
                marks[name] = Mark(mark.version, int(position), updated_at)
    return marks


def read_checkpoints(conn: sa.Connection) -> dict[str, tuple[int, int]]:
    """name -> (version, position) for every stored checkpoint."""
    return {name: (m.version, m.position) for name, m in read_marks(conn).items()}


# Names sorted: two appends sharing a lane lock its rows in the same order.
_LANE_ADVANCE = (
    "INSERT INTO projection_checkpoint_lanes (name, lane, position, updated_at)"
    " SELECT n, %(lane)s::integer, %(position)s::bigint, %(now)s::timestamptz"
    " FROM unnest(%(names)s::text[]) AS n"
    " ON CONFLICT (name, lane) DO UPDATE SET position = excluded.position,"
    " updated_at = excluded.updated_at"
    " WHERE projection_checkpoint_lanes.position < excluded.position"
)


def advance_inline(conn: sa.Connection, names: Sequence[str], position: int, now: datetime,
                   stream_id: str) -> None:
    """``advance`` for an inline append to ``stream_id``: on PostgreSQL, in its lane."""
    key = tuple(names)
    if not key:
        return
    if conn.dialect.name != "postgresql":
        advance(conn, key, position, now)
        return
    driver_cursor(conn).execute(_LANE_ADVANCE, {
        "names": sorted(key), "lane": lane_of(stream_id), "position": position, "now": now})


def advance(conn: sa.Connection, names: Sequence[str], position: int, now: datetime) -> None:
    """Move checkpoints forward to ``position``; never backwards.

    Runs after every inline append, so the statement (one per set of names) is compiled
    once and run on the driver's cursor.
    """
    key = tuple(names)
    if not key:
        return
    stmt = driver_statement(conn.dialect, ("checkpoints.advance", key),
                            lambda: _advance_statement(key))
    stmt.execute(conn, {"position": position, "now": now})


def reset(conn: sa.Connection, name: str, version: int, position: int, now: datetime) -> None:
    """Set a checkpoint outright (used by rebuild, inside the rebuild's transaction)."""
    if conn.dialect.name == "postgresql":
        conn.execute(checkpoint_lanes.delete().where(checkpoint_lanes.c.name == name))
    updated = conn.execute(
        checkpoints.update().where(checkpoints.c.name == name)
        .values(version=version, position=position, updated_at=now)
    ).rowcount
    if not updated:
        conn.execute(checkpoints.insert().values(name=name, version=version, position=position,
                                                 updated_at=now))
