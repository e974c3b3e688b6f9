"""Cut evidence: projection rows that name events the log no longer holds.

Every projection row that an event set keeps that event's position (a column named
``position`` or ``*_position``; tables with a ``stream_id`` keep the event's stream
there too). When events are deleted behind the log's back, such rows stay: a session still
counts its cut messages, a setting still names the event that set it. ``verify`` reports
them without a witness or anchor:

- a position past the log's head (its tail was cut);
- a position the log no longer holds, or holds for another stream (an event removed, or
  its position handed out again by a later append).

Checkpoints past the head are the runner's status (``ProjectionRunner.status``); seals past
the head are ``store.seal.check_seals``. Whoever deletes events *and* rewrites the
projections to match leaves no such evidence: only a witness or an anchor catches that.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import sqlalchemy as sa

from ctxledger.projections.base import Projection
from ctxledger.store.read import head_position
from ctxledger.store.schema import events


def position_columns(projections: Iterable[Projection]) -> Iterator[sa.Column[int]]:
    """Every projection column that holds the position of the event that set its row."""
    for projection in projections:
        for table in projection.tables:
            for column in table.columns:
                if column.name == "position" or column.name.endswith("_position"):
                    yield column


def cut_evidence(conn: sa.Connection, projections: Iterable[Projection]) -> list[str]:
    """Problems naming projection rows that count events the log no longer holds.

    Run it in one snapshot (``read_snapshot``): the head and the rows must agree."""
    head = head_position(conn)
    problems: list[str] = []
    for column in position_columns(projections):
        table = column.table
        top = conn.execute(sa.select(sa.func.max(column))).scalar()
        if top is not None and int(top) > head:
            problems.append(f"projection table {table.name} holds position {int(top)}"
                            f" ({column.name}) but the log ends at {head}: events were"
                            " removed")
            continue
        match = events.c.position == column
        if "stream_id" in table.c:
            match = sa.and_(match, events.c.stream_id == table.c.stream_id)
        missing = sa.select(sa.func.count(), sa.func.min(column)).where(
            column.is_not(None), ~sa.exists(sa.select(1).where(match)))
        count, first = conn.execute(missing).one()
        if count:
            problems.append(f"projection table {table.name} has {int(count)} row(s) whose"
                            f" {column.name} names an event the log no longer holds (first"
                            f" at position {int(first)}): events were removed")
    return problems
