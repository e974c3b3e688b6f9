"""Usage rollups: the rolled-up days come from events; the job's figures survive rebuilds."""

from __future__ import annotations

from datetime import date

import sqlalchemy as sa

from ctxledger import Ledger
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
        job = conn.execute(sa.select(usage_daily_tools.c.day, usage_daily_tools.c.uses)).all()
    assert [tuple(r) for r in days] == [("2026-04-01", 4, "c" * 64), ("2026-04-02", 0, "b")]
    assert [tuple(r) for r in job] == [(date(2026, 4, 1), 4)]
