"""Projection checkpoints: the last position applied, stored beside the projection's rows."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import sqlalchemy as sa

from projections.base import metadata
from store.schema import PositionType, UTCDateTime

checkpoints = sa.Table(
    "projection_checkpoints",
    metadata,
    sa.Column("name", sa.String(100), primary_key=True),
    sa.Column("version", sa.Integer, nullable=False),
    sa.Column("position", PositionType, nullable=False),
    sa.Column("updated_at", UTCDateTime, nullable=False),
)

_ADVANCE = (
    checkpoints.update()
    .where(checkpoints.c.name.in_(sa.bindparam("names", expanding=True)),
           checkpoints.c.position < sa.bindparam("position"))
    .values(position=sa.bindparam("position"), updated_at=sa.bindparam("now"))
)


def read_checkpoints(conn: sa.Connection) -> dict[str, tuple[int, int]]:
    """name -> (version, position) for every stored checkpoint."""
    return {r.name: (int(r.version), int(r.position))
            for r in conn.execute(sa.select(checkpoints))}


def advance(conn: sa.Connection, names: Sequence[str], position: int, now: datetime) -> None:
    """Move checkpoints forward to ``position``; never backwards."""
    conn.execute(_ADVANCE, {"names": list(names), "position": position, "now": now})


def reset(conn: sa.Connection, name: str, version: int, position: int, now: datetime) -> None:
    """Set a checkpoint outright (used by rebuild, inside the rebuild's transaction)."""
    updated = conn.execute(
        checkpoints.update().where(checkpoints.c.name == name)
        .values(version=version, position=position, updated_at=now)
    ).rowcount
    if not updated:
        conn.execute(checkpoints.insert().values(name=name, version=version, position=position,
                                                 updated_at=now))
