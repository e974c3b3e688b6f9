"""Deterministic dumps of projection state, to compare live projections with a rebuild."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from ctxledger import Ledger
from ctxledger.projections.checkpoints import read_checkpoints

TableDump = dict[str, list[tuple[Any, ...]]]


def projection_tables(ledger: Ledger) -> list[sa.Table]:
    """Every table owned by the ledger's projections, in registry order."""
    return [table for projection in ledger.runner.projections for table in projection.tables]


def dump_projections(ledger: Ledger) -> TableDump:
    """Every row of every projection table, ordered by primary key (then all columns).

    Also includes each checkpoint's (name, version, position), leaving out its wall-clock
    ``updated_at``, which legitimately differs between an inline update and a rebuild.
    """
    out: TableDump = {}
    with ledger.engine.connect() as conn:
        for table in projection_tables(ledger):
            order = [*table.primary_key.columns, *table.columns]
            rows = conn.execute(sa.select(table).order_by(*order)).all()
            out[table.name] = [tuple(row) for row in rows]
        # Through read_checkpoints: on PostgreSQL inline appends advance lanes, not the row.
        marks = read_checkpoints(conn)
        out["projection_checkpoints"] = [(name, *marks[name]) for name in sorted(marks)]
    return out


def assert_projections_equal_rebuild(ledger: Ledger) -> TableDump:
    """Dump, rebuild every projection from the log, dump again; the dumps must match."""
    before = dump_projections(ledger)
    ledger.rebuild()
    after = dump_projections(ledger)
    for name in sorted(set(before) | set(after)):
        assert before.get(name) == after.get(name), f"projection table {name} != rebuild"
    return after


def raw_events(ledger: Ledger) -> list[tuple[Any, ...]]:
    """Every stored column of every event, exactly as stored, in position order."""
    with ledger.engine.connect() as conn:
        rows = conn.exec_driver_sql(
            "SELECT position, stream_id, stream_version, event_id, type, schema_version,"
            " data, metadata, recorded_at, prev_hash, hash FROM events ORDER BY position"
        ).all()
    return [tuple(row) for row in rows]
