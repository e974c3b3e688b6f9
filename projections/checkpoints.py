"""Projection checkpoints: where each projection stands, stored beside its rows.

A projection is either *inline* or *catch-up*:

- ``inline`` true: the projection is applied in every append's own transaction, so it is
  at the head by construction and no append writes its checkpoint (that was one
  page per commit). ``position`` is then only a mark the projection has certainly
  reached, refreshed every ``MARK_EVERY`` positions, so ``verify`` still sees a projection
  that is ahead of a log whose newest events were removed.
- ``inline`` false: ``position`` is the last position applied; the catch-up runner
  brings it to the head (and makes it inline again).

A writer that does not run an inline projection turns it into a catch-up one at the
position before its own events, in the same transaction (``demote_others``).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import sqlalchemy as sa

from ctxledger.projections.base import metadata
from ctxledger.store.schema import PositionType, UTCDateTime
from ctxledger.store.sql_engine import driver_statement

checkpoints = sa.Table(
    "projection_checkpoints",
    metadata,
    sa.Column("name", sa.String(100), primary_key=True),
    sa.Column("version", sa.Integer, nullable=False),
    sa.Column("position", PositionType, nullable=False),
    sa.Column("updated_at", UTCDateTime, nullable=False),
    sa.Column("inline", sa.Boolean, nullable=False, server_default=sa.false()),
)

MARK_EVERY = 1_000
"""An inline projection's mark is refreshed when the head is this far past it."""

Stored = tuple[int, int, bool]
"""(version, position, inline) of one stored checkpoint."""


def _names_param(names: tuple[str, ...]) -> sa.BindParameter[str]:
    # The names are fixed per runner: rendered into the SQL, not bound on each append.
    return sa.bindparam("names", value=list(names), type_=checkpoints.c.name.type,
                        literal_execute=True)


def _advance_statement(names: tuple[str, ...]) -> sa.Update:
    """One UPDATE moving every named checkpoint that is behind ``position`` to it."""
    position = sa.bindparam("position", type_=checkpoints.c.position.type, required=False)
    now = sa.bindparam("now", type_=checkpoints.c.updated_at.type, required=False)
    return (checkpoints.update()
            .where(checkpoints.c.name.in_(_names_param(names)),
                   checkpoints.c.position < position)
            .values(position=position, updated_at=now))


def _demote_statement(names: tuple[str, ...]) -> sa.Update:
    """Inline checkpoints of projections *not* in ``names`` become catch-up ones."""
    position = sa.bindparam("position", type_=checkpoints.c.position.type, required=False)
    now = sa.bindparam("now", type_=checkpoints.c.updated_at.type, required=False)
    return (checkpoints.update()
            .where(checkpoints.c.inline.is_(True),
                   checkpoints.c.name.not_in(_names_param(names)))
            .values(inline=False, position=position, updated_at=now))


def read_checkpoints(conn: sa.Connection) -> dict[str, Stored]:
    """name -> (version, position, inline) for every stored checkpoint."""
    return {r.name: (int(r.version), int(r.position), bool(r.inline))
            for r in conn.execute(sa.select(checkpoints))}


def advance(conn: sa.Connection, names: Sequence[str], position: int, now: datetime) -> None:
    """Move checkpoints (or inline marks) forward to ``position``; never backwards.

    The statement (one per set of names) is compiled once and run on the driver's cursor.
    """
    key = tuple(names)
    if not key:
        return
    stmt = driver_statement(conn.dialect, ("checkpoints.advance", key),
                            lambda: _advance_statement(key))
    stmt.execute(conn, {"position": position, "now": now})


def demote_others(conn: sa.Connection, names: Sequence[str], before: int,
                  now: datetime) -> None:
    """Inline projections outside ``names`` stop at ``before``: this append does not apply
    them, so they must catch up later. Writes nothing when every inline one is in
    ``names`` (the usual case: one zero-row UPDATE on a table of a few rows)."""
    key = tuple(names)
    stmt = driver_statement(conn.dialect, ("checkpoints.demote", key),
                            lambda: _demote_statement(key))
    stmt.execute(conn, {"position": before, "now": now})


def mark_inline(conn: sa.Connection, names: Sequence[str], head: int, now: datetime) -> None:
    """The named projections are at ``head`` and applied inline from now on (rows that
    already are inline are left alone, so opening a database again rewrites nothing)."""
    if not names:
        return
    conn.execute(checkpoints.update()
                 .where(checkpoints.c.name.in_(list(names)), checkpoints.c.inline.is_(False))
                 .values(inline=True, position=head, updated_at=now))


def reset(conn: sa.Connection, name: str, version: int, position: int, now: datetime) -> None:
    """Set a checkpoint outright (used by rebuild, inside the rebuild's transaction)."""
    updated = conn.execute(
        checkpoints.update().where(checkpoints.c.name == name)
        .values(version=version, position=position, updated_at=now, inline=False)
    ).rowcount
    if not updated:
        conn.execute(checkpoints.insert().values(name=name, version=version, position=position,
                                                 updated_at=now, inline=False))
