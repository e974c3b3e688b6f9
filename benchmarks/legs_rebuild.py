"""Rebuild leg: every built-in projection rebuilt from the full mix, in events per second.

The log is written first (untimed) the way a live application writes it: one append per
event, so each event has its own timestamp and sessions interleave. Then
``Ledger.rebuild()`` (wipe every projection table, fold the whole log, flush) is timed
once per round. The first round also checks that the rebuilt tables equal the ones the
inline path had produced.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from legs_append import ledger_url, timed
from registry import AtLeast, Comparison, Context, Measure, leg

from ctxledger import Ledger


def projection_dump(ledger: Ledger) -> dict[str, list[tuple[Any, ...]]]:
    """Every projection table's rows, sorted, for comparing two states."""
    out: dict[str, list[tuple[Any, ...]]] = {}
    with ledger.engine.connect() as conn:
        for projection in ledger.runner.projections:
            for table in projection.tables:
                rows = conn.execute(sa.select(table)).all()
                out[table.name] = sorted((tuple(r) for r in rows), key=repr)
    return out


@leg("rebuild", "rebuild of every projection")
def rebuild(ctx: Context) -> list[Comparison]:
    """Rebuild speed of all built-in projections over the whole mix."""
    with ctx.fresh_dir("ctxledger-rebuild") as directory, \
            Ledger.open(ledger_url(directory)) as ledger:
        for event in ctx.mix:
            ledger.append(event.stream_id, event.as_input())
        head = ledger.head()
        before = projection_dump(ledger)
        rates: list[float] = []
        rebuilt: list[str] = []

        def run() -> None:
            rebuilt[:] = ledger.rebuild()

        for round_index in range(ctx.settings.rounds):
            rates.append(head / timed(run))
            if len(rebuilt) != len(ledger.runner.projections):
                raise RuntimeError(f"rebuild covered {rebuilt}, not every projection")
            if round_index == 0 and projection_dump(ledger) != before:
                raise RuntimeError("the rebuilt projections differ from the inline ones")
        tables = sum(len(p.tables) for p in ledger.runner.projections)
        note = (f"{head:,} events, {len(ledger.runner.projections)} projections,"
                f" {tables} tables")
    return [Comparison("rebuild", "rebuild of every projection", Measure.median_of(rates, "ev/s"),
                       None, None, AtLeast(150_000, "ev/s"), note)]
