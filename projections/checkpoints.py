"""Projection checkpoints: the last position applied, stored beside the projection's rows."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import sqlalchemy as sa

from ctxledger.projections.base import metadata
from ctxledger.store.engine import driver_statement
from ctxledger.store.schema import PositionType, UTCDateTime

checkpoints = sa.Table(
    "projection_checkpoints",
    metadata,
    sa.Column("name", sa.String(100), primary_key=True),
    sa.Column("version", sa.Integer, nullable=False),
    sa.Column("position", PositionType, nullable=False),
    sa.Column("updated_at", UTCDateTime, nullable=False),
)



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


def read_checkpoints(conn: sa.Connection) -> dict[str, tuple[int, int]]:
    """name -> (version, position) for every stored checkpoint."""
    return {r.name: (int(r.version), int(r.position))
            for r in conn.execute(sa.select(checkpoints))}


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
    updated = conn.execute(
        checkpoints.update().where(checkpoints.c.name == name)
        .values(version=version, position=position, updated_at=now)
    ).rowcount
    if not updated:
        conn.execute(checkpoints.insert().values(name=name, version=version, position=position,
                                                 updated_at=now))
