"""``verify --deep``: rebuild every projection in a scratch store and compare, table by table.

The hash chains prove the log; this proves the derived state: that no projection row was
edited, added or lost behind the log's back, and that inline updates fold exactly as a
rebuild does. The scratch store is an in-memory SQLite database with the same migrations;
live projections are never touched. The live side is read in one snapshot, so appends
running meanwhile do not make it differ.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

import sqlalchemy as sa

from ctxledger import _migrate as migrate
from ctxledger.projections.base import Projection
from ctxledger.projections.runner import ProjectionRunner
from ctxledger.projections.view_loader import read_snapshot
from ctxledger.store.clock import Clock
from ctxledger.store.log import EventLog
from ctxledger.store.read import head_position
from ctxledger.store.schema import events
from ctxledger.store.sql_engine import create_engine

COPY_PAGE = 20_000
"""Events copied into the scratch store per query."""

Rows = Counter[tuple[Any, ...]]


def _rows(conn: sa.Connection, table: sa.Table) -> Rows:
    return Counter(tuple(row) for row in conn.execute(sa.select(table)))


def _copy_events(source: sa.Connection, target: sa.Connection, head: int) -> None:
    after = 0
    while True:
        rows = source.execute(sa.select(events).where(events.c.position > after,
                                                      events.c.position <= head)
                              .order_by(events.c.position).limit(COPY_PAGE)).all()
        if rows:
            target.execute(events.insert(), [row._asdict() for row in rows])
            after = int(rows[-1].position)
        if len(rows) < COPY_PAGE:
            return


def compare_with_rebuild(log: EventLog, projections: Iterable[Projection],
                         clock: Clock) -> list[str]:
    """Differences between the live projection tables and a rebuild from the log.

    One problem per table that differs, with how many rows only each side has.
    """
    chosen = tuple(projections)
    tables = [table for projection in chosen for table in projection.tables]
    scratch = create_engine("sqlite://")
    try:
        migrate.upgrade(scratch)
        with log.connection() as live, read_snapshot(live), scratch.begin() as target:
            head = head_position(live)
            live_rows = {table.name: _rows(live, table) for table in tables}
            _copy_events(live, target, head)
            ProjectionRunner(chosen, clock=clock).bring_up_to_date(
                target, force=[p.name for p in chosen])
            rebuilt = {table.name: _rows(target, table) for table in tables}
    finally:
        scratch.dispose()
    problems = []
    for table in tables:
        ours, theirs = live_rows[table.name], rebuilt[table.name]
        if ours != theirs:
            only_live = sum((ours - theirs).values())
            only_rebuilt = sum((theirs - ours).values())
            problems.append(
                f"projection table {table.name} differs from a rebuild of the log up to"
                f" position {head}: {only_live} row(s) only live, {only_rebuilt} only rebuilt")
    return problems
