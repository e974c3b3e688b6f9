"""The nightly rollup job (SPEC §5): catch-up, figures, idempotence, pruning, retention.

Time is an explicit clock (``StepClock``) and an explicit ``now``; every test runs on
SQLite and PostgreSQL.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta

import pytest
import sqlalchemy as sa
from helpers.tables import assert_projections_equal_rebuild, dump_projections
from helpers.usage_log import (
    StepClock,
    at,
    figures_from_events,
    figures_from_rollups,
    roll,
    rollup_events,
    write_usage_log,
)

from ctxledger import Ledger
from ctxledger.jobs._rollup import (
    ROLLUP_ID_NAMESPACE,
    RollupPolicy,
    rollup_event_id,
    run_rollup,
)
from ctxledger.projections.tool_usage_tables import tool_usage, tool_uses
from ctxledger.projections.usage_rollups import JOB_TABLES
from ctxledger.store.errors import LedgerError

FIRST = date(2026, 3, 2)


@pytest.fixture
def clock() -> StepClock:
    return StepClock(datetime(2026, 3, 1, tzinfo=UTC))


@pytest.fixture
def timed(db_url: str, clock: StepClock) -> Iterator[Ledger]:
    """A ledger on each backend whose clock the test moves."""
    with Ledger.open(db_url, clock=clock) as opened:
        yield opened


def job_rows(ledger: Ledger) -> dict[str, list[tuple[object, ...]]]:
    with ledger.engine.connect() as conn:
        return {t.name: sorted(tuple(r) for r in conn.execute(sa.select(t)).all())
                for t in JOB_TABLES}


def test_every_complete_day_is_rolled_up_once_and_figures_equal_the_events(
        timed: Ledger, clock: StepClock) -> None:
    write_usage_log(timed, clock, FIRST, days=5)
    now = at(FIRST + timedelta(days=5), 3)
    report = roll(timed, clock, now)

    days = [FIRST + timedelta(days=i) for i in range(5)]
    assert [d.day for d in report.rolled] == [d.isoformat() for d in days]
    events = rollup_events(timed)
    assert [e[0] for e in events] == [d.isoformat() for d in days]
    assert [e[2] for e in events] == [str(uuid.uuid5(ROLLUP_ID_NAMESPACE,
                                                     f"rollup.completed/{d.isoformat()}"))
                                      for d in days]
    assert events[2][1] == 0  # the empty day still gets its event, with rows: 0
    assert all(rows > 0 for _, rows, _ in events[:2] + events[3:])
    assert figures_from_rollups(timed) == figures_from_events(timed, before=now.date())
    assert sum(len(rows) for rows in job_rows(timed).values()) == sum(e[1] for e in events)


def test_a_second_run_appends_nothing_and_changes_no_row(timed: Ledger,
                                                         clock: StepClock) -> None:
    write_usage_log(timed, clock, FIRST, days=4)
    now = at(FIRST + timedelta(days=4), 5)
    first = roll(timed, clock, now)
    head, rows, projections = timed.head(), job_rows(timed), dump_projections(timed)

    again = roll(timed, clock, now + timedelta(hours=1))
    assert again.rolled == [] and again.skipped == []
    assert (timed.head(), job_rows(timed), dump_projections(timed)) == (head, rows, projections)
    assert len(first.rolled) == 4


def test_a_backlog_is_caught_up_oldest_first_and_today_waits(timed: Ledger,
                                                             clock: StepClock) -> None:
    write_usage_log(timed, clock, FIRST, days=3)
    first = roll(timed, clock, at(FIRST + timedelta(days=1)))
    assert [d.day for d in first.rolled] == ["2026-03-02"]
    # Today (03-04 at noon) is not complete; 03-03 is.
    clock.now = at(FIRST + timedelta(days=2), 12)
    assert [d.day for d in roll(timed, clock).rolled] == ["2026-03-03"]
    # Ten idle days later every missing day comes in one run: one stretch of empty days.
    report = roll(timed, clock, at(FIRST + timedelta(days=12), 3))
    assert [(d.day, d.last_day, d.rows) for d in report.rolled] == [
        ("2026-03-04", "2026-03-13", 0)]


def test_the_rollup_event_is_idempotent_by_day(timed: Ledger, clock: StepClock) -> None:
    write_usage_log(timed, clock, FIRST, days=2)
    report = roll(timed, clock, at(FIRST + timedelta(days=1)))
    done = report.rolled[0]
    stored = next(e for e in timed.events("system") if e.position == done.position)
    assert stored.event_id == rollup_event_id(FIRST)
    again = timed.append("system", {"type": "rollup.completed",
                                    "id": rollup_event_id(FIRST), "data": stored.data})
    assert again.duplicate and again.positions == (done.position,)


def test_an_empty_log_rolls_up_nothing(ledger: Ledger) -> None:
    report = ledger.rollup(datetime(2026, 3, 1, tzinfo=UTC))
    assert report.rolled == [] and ledger.head() == 0


def test_naive_now_is_rejected_and_nothing_is_written(timed: Ledger, clock: StepClock) -> None:
    write_usage_log(timed, clock, FIRST, days=2)
    head = timed.head()
    with pytest.raises(ValueError, match="timezone-aware"):
        timed.rollup(datetime(2026, 3, 9))
    assert timed.head() == head


# -- pruning ---------------------------------------------------------------------------------


def daily_uses(ledger: Ledger, clock: StepClock, days: int) -> None:
    ledger.append("s1", {"type": "session.started", "data": {"scope": "alpha"}})
    for i in range(days):
        clock.now = at(FIRST + timedelta(days=i), 10)
        ledger.append("s1", {"type": "tool.used", "data": {"tool_name": "Read"}})


def kept_days(ledger: Ledger) -> list[date]:
    with ledger.engine.connect() as conn:
        return [r.used_at.date() for r in conn.execute(
            sa.select(tool_uses.c.used_at).order_by(tool_uses.c.used_at))]


def test_raw_tool_uses_past_the_retention_are_pruned_and_a_rebuild_agrees(
        timed: Ledger, clock: StepClock) -> None:
    daily_uses(timed, clock, 40)
    report = roll(timed, clock, at(FIRST + timedelta(days=40), 3))
    assert report.retention_days == 30
    last = FIRST + timedelta(days=39)
    assert kept_days(timed) == [last - timedelta(days=29 - i) for i in range(30)]
    with timed.engine.connect() as conn:
        lifetime = conn.execute(sa.select(tool_usage.c.lifetime_count)).scalar_one()
    assert lifetime == 40  # lifetime figures stay; only per-use rows go
    assert sum(1 for e in timed.events() if e.type == "tool.used") == 40  # events stay
    assert_projections_equal_rebuild(timed)
    # The rolled-up figures keep the pruned days' counts.
    assert len(figures_from_rollups(timed)["tools"]) == 40


def test_retention_never_goes_below_the_largest_usage_window_plus_a_day(
        timed: Ledger, clock: StepClock) -> None:
    clock.now = at(FIRST)
    timed.append("scope:alpha", {"type": "setting.changed",
                                 "data": {"key": "usage_window_days", "value": 12}})
    timed.append("s2", {"type": "session.started", "data": {"scope": "beta"}})
    timed.append("s2", {"type": "setting.changed",
                        "data": {"key": "policy.session", "value": {"usage_window_days": 20}}})
    daily_uses(timed, clock, 40)
    report = roll(timed, clock, at(FIRST + timedelta(days=40), 3),
                          policy=RollupPolicy(retention_days=5))
    assert report.retention_days == 21
    assert len(kept_days(timed)) == 21
    assert_projections_equal_rebuild(timed)


def test_the_floor_ignores_a_setting_that_does_not_validate(timed: Ledger,
                                                            clock: StepClock) -> None:
    clock.now = at(FIRST)
    check, timed.log.check = timed.log.check, None  # stored unchecked, by an older release
    timed.append("scope:alpha", {"type": "setting.changed",
                                 "data": {"key": "usage_window_days", "value": "lots"}})
    timed.log.check = check
    daily_uses(timed, clock, 12)
    report = roll(timed, clock, at(FIRST + timedelta(days=12)),
                  policy=RollupPolicy(retention_days=3))
    assert report.retention_days == 8  # the default 7-day window + 1
    assert len(kept_days(timed)) == 8


# -- reading: ``Ledger.usage`` ------------------------------------------------------------------


def test_usage_is_the_same_before_and_after_the_rollup(timed: Ledger, clock: StepClock) -> None:
    write_usage_log(timed, clock, FIRST, days=5)
    clock.now = at(FIRST + timedelta(days=5), 8)
    timed.append("s1", {"type": "tool.used", "data": {"tool_name": "Read"}})  # today, raw
    now = at(FIRST + timedelta(days=5), 9)
    before = timed.usage("alpha", days=6, now=now)
    roll(timed, clock, now)
    after = timed.usage("alpha", days=6, now=now)
    assert [d.source for d in before.days] == ["raw"] * 6
    assert [d.source for d in after.days] == ["rollup"] * 5 + ["raw"]
    strip = [d.model_dump(exclude={"source"}) for d in before.days]
    assert strip == [d.model_dump(exclude={"source"}) for d in after.days]
    assert (before.tools, before.servers) == (after.tools, after.servers)

    expected = figures_from_events(timed, before=now.date() + timedelta(days=1))
    read = {name.name: name.daily for name in after.tools}
    for offset in range(6):
        day = FIRST + timedelta(days=offset)
        assert read["Read"][offset] == expected["tools"][("alpha", "Read", day)]
        assert after.days[offset].appended == expected["appended"][("alpha", day)]
        assert after.days[offset].retracted == expected["retracted"][("alpha", day)]
    assert {s.name for s in after.servers} == {"gh"}
    assert after.days[-1].complete is False and after.days[0].complete is True


def test_usage_rejects_an_unknown_scope_and_a_bad_span(timed: Ledger, clock: StepClock) -> None:
    write_usage_log(timed, clock, FIRST, days=2)
    with pytest.raises(LedgerError, match="unknown scope 'nope'"):
        timed.usage("nope")
    for days in (0, -3, 10_000):
        with pytest.raises(LedgerError, match="days must be between"):
            timed.usage("alpha", days=days)
    # s3 never said session.started: its message counts in scope "default".
    assert [d.appended for d in timed.usage("default", days=3, now=at(FIRST, 50)).days] == [0, 1, 0]


def test_today_counts_what_was_recorded_up_to_now_included(timed: Ledger,
                                                          clock: StepClock) -> None:
    daily_uses(timed, clock, 1)
    when = clock.now
    assert [d.tool_uses for d in timed.usage("alpha", days=1, now=when).days] == [1]
    assert [d.tool_uses for d in timed.usage(
        "alpha", days=1, now=when - timedelta(microseconds=1)).days] == [0]


def test_a_stop_request_ends_the_catch_up_between_two_days(timed: Ledger,
                                                           clock: StepClock) -> None:
    write_usage_log(timed, clock, FIRST, days=4)
    asked: list[int] = []

    def should_stop() -> bool:
        asked.append(1)
        return len(asked) > 2  # let two days through

    now = at(FIRST + timedelta(days=4), 3)
    clock.now = now
    stopped = run_rollup(timed.log, timed.clock, should_stop=should_stop)
    assert stopped.stopped and [d.day for d in stopped.rolled] == ["2026-03-02", "2026-03-03"]
    rest = roll(timed, clock, now)  # the next run goes on where it stopped
    assert [d.day for d in rest.rolled] == ["2026-03-04", "2026-03-05"]
    assert figures_from_rollups(timed) == figures_from_events(timed, before=now.date())


def test_a_day_rolled_up_by_another_process_meanwhile_is_skipped(timed: Ledger, db_url: str,
                                                                clock: StepClock) -> None:
    """Two jobs race: the first has listed its pending days when the second rolls them all
    up; under the lock the first finds each day done and writes nothing."""
    write_usage_log(timed, clock, FIRST, days=4)
    now = at(FIRST + timedelta(days=4), 3)
    other_reports = []

    def other_job_runs_now() -> bool:
        if not other_reports:
            with Ledger.open(db_url) as other:  # its own engine, as another process has
                other_reports.append(other.rollup(now))
        return False

    head_before = timed.head()
    clock.now = now
    mine = run_rollup(timed.log, timed.clock, should_stop=other_job_runs_now)
    days = [(FIRST + timedelta(days=i)).isoformat() for i in range(4)]
    assert [d.day for d in other_reports[0].rolled] == days
    assert mine.rolled == [] and mine.skipped == days
    assert [e[0] for e in rollup_events(timed)] == days
    assert timed.head() == head_before + 4
