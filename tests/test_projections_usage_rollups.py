"""Usage rollups: the rolled-up days come from events; the job's figures survive rebuilds."""

from __future__ import annotations

from datetime import date

import pytest
import sqlalchemy as sa

from ctxledger import EventValidationError, Ledger
from ctxledger.projections.usage_rollups import rollup_days, usage_daily_tools


def rolled(day: str, rows: int, digest: str) -> dict[str, object]:
    return {"type": "rollup.completed", "data": {"day": day, "rows": rows, "digest": digest}}


def test_rollup_days_follow_events_and_job_rows_survive_rebuild(ledger: Ledger) -> None:
    ledger.append("system", [rolled("2026-04-01", 3, "a" * 64), rolled("2026-04-02", 0, "b")])
    ledger.append("system", rolled("2026-04-01", 4, "c" * 64))
    with ledger.engine.begin() as conn:
        conn.execute(usage_daily_tools.insert().values(
            scope="p", tool_name="grep", day=date(2026, 4, 1), uses=4, last_used=None))
    ledger.rebuild()
    with ledger.engine.connect() as conn:
        days = conn.execute(sa.select(rollup_days.c.day, rollup_days.c.rows, rollup_days.c.digest)
                            .order_by(rollup_days.c.day)).all()
        # Events written before spans: one day each, read through their own position.
        spans = conn.execute(sa.select(rollup_days.c.last_day, rollup_days.c.read_through,
                                       rollup_days.c.position)
                             .order_by(rollup_days.c.day)).all()
        job = conn.execute(sa.select(usage_daily_tools.c.day, usage_daily_tools.c.uses)).all()
    assert [tuple(r) for r in days] == [("2026-04-01", 4, "c" * 64), ("2026-04-02", 0, "b")]
    assert [tuple(r) for r in job] == [(date(2026, 4, 1), 4)]
    assert [tuple(r) for r in spans] == [("2026-04-01", 3, 3), ("2026-04-02", 2, 2)]


def test_a_stretch_of_empty_days_is_one_row(ledger: Ledger) -> None:
    ledger.append("system", {"type": "rollup.completed", "data": {
        "day": "2026-04-03", "last_day": "9998-12-30", "rows": 0, "digest": "e",
        "read_through": 7, "prune_before": "2026-03-05"}})
    with ledger.engine.connect() as conn:
        rows = conn.execute(sa.select(rollup_days)).mappings().all()
    assert [dict(r) for r in rows] == [{
        "day": "2026-04-03", "last_day": "9998-12-30", "rows": 0, "digest": "e",
        "position": 1, "read_through": 7, "prune_before": "2026-03-05"}]


def test_a_stretch_that_ends_before_it_starts_or_holds_rows_is_refused(ledger: Ledger) -> None:
    for data, needle in (({"last_day": "2026-04-02"}, "is before day 2026-04-03"),
                         ({"last_day": "2026-04-05", "rows": 2}, "holds no rows")):
        with pytest.raises(EventValidationError, match=needle):
            ledger.append("system", {"type": "rollup.completed", "data": {
                "day": "2026-04-03", "rows": 0, "digest": "e", **data}})
    assert ledger.head() == 0
