"""A rollup closes only days that are over, never misses a late event, and costs the days
that hold data: ``now`` bounded by the clock and the log, re-rolled days, empty stretches.

Every test runs on SQLite and PostgreSQL. "From scratch" is the same events copied into a
fresh ledger (same ids, data and times) and rolled up once: the figures a late event
must end in, whatever the order the events came in.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa
from freezegun import freeze_time
from helpers.databases import sibling_database
from helpers.tables import assert_projections_equal_rebuild
from helpers.usage_log import (
    StepClock,
    at,
    figures_from_events,
    figures_from_rollups,
    roll,
    write_usage_log,
)

from ctxledger import Ledger
from ctxledger.jobs._rollup import RollupPolicy, run_rollup
from ctxledger.jobs._usage import UsageReport
from ctxledger.projections.tool_usage_tables import USE_TABLES
from ctxledger.store.errors import LedgerError

FIRST = date(2026, 3, 2)


@pytest.fixture
def clock() -> StepClock:
    return StepClock(datetime(2026, 3, 1, tzinfo=UTC))


@pytest.fixture
def timed(db_url: str, clock: StepClock) -> Iterator[Ledger]:
    with Ledger.open(db_url, clock=clock) as opened:
        yield opened


def rollup_data(ledger: Ledger) -> list[dict[str, object]]:
    return [e.data for e in ledger.events("system") if e.type == "rollup.completed"]


def from_scratch(ledger: Ledger, db_url: str, tmp_path: Path, now: datetime,
                 policy: RollupPolicy | None = None) -> dict[str, object]:
    """The rollup figures of the same session events, written in order of time into a
    fresh ledger and rolled up once at ``now``."""
    events = [e for e in ledger.events() if e.stream_id != "system"]
    # A session's start comes before its other events (a stream's scope is fixed by it),
    # still at its own time: it goes where the stream's earliest event goes.
    earliest: dict[str, datetime] = {}
    for event in events:
        earliest[event.stream_id] = min(earliest.get(event.stream_id, event.recorded_at),
                                        event.recorded_at)
    copies = sorted(events, key=lambda e: (
        (earliest[e.stream_id], 0) if e.type == "session.started" else (e.recorded_at, 1),
        e.position))
    with sibling_database(db_url, tmp_path) as url:
        clock = StepClock(copies[0].recorded_at)
        with Ledger.open(url, clock=clock) as fresh:
            for event in copies:
                clock.now = event.recorded_at
                fresh.append(event.stream_id, {"type": event.type, "data": event.data,
                                               "id": event.event_id})
            clock.now = now
            fresh.rollup(policy=policy)
            return dict(figures_from_rollups(fresh))


# -- now: never ahead of the clock, never before the log -----------------------------------


def test_a_now_later_than_the_clock_is_refused_and_writes_nothing(timed: Ledger,
                                                                  clock: StepClock) -> None:
    write_usage_log(timed, clock, FIRST, days=3)
    clock.now = at(FIRST + timedelta(days=2), 10)
    head = timed.head()
    with pytest.raises(LedgerError, match=r"^now 2026-03-07T03:00:00Z is later than the "
                                          r"ledger's clock \(2026-03-04T10:00:00Z\)"):
        timed.rollup(at(FIRST + timedelta(days=5), 3))
    assert timed.head() == head and rollup_data(timed) == []
    # The test-only override still works, and is the only way past the clock.
    report = run_rollup(timed.log, timed.clock, now=at(FIRST + timedelta(days=5), 3),
                        future_now_for_tests=True)
    assert report.rolled[-1].last_day == "2026-03-06"


def test_the_clock_freezegun_sets_is_the_limit(db_url: str) -> None:
    with Ledger.open(db_url) as ledger, freeze_time("2026-11-24T10:00:00Z") as frozen:
        ledger.append("s1", {"type": "session.started", "data": {"scope": "alpha"}})
        ledger.append("s1", {"type": "tool.used", "data": {"tool_name": "Read"}})
        with pytest.raises(LedgerError, match="later than the ledger's clock"):
            ledger.rollup(datetime(2026, 11, 27, 3, tzinfo=UTC))
        assert ledger.rollup().rolled == []  # today is not over
        frozen.tick(timedelta(hours=2))
        for _ in range(2):
            ledger.append("s1", {"type": "tool.used", "data": {"tool_name": "Read"}})
        frozen.move_to("2026-11-27T03:00:00Z")
        report = ledger.rollup()
        assert [(d.day, d.last_day) for d in report.rolled] == [
            ("2026-11-24", "2026-11-24"), ("2026-11-25", "2026-11-26")]
        usage: UsageReport = ledger.usage("alpha", days=4)
        assert [d.tool_uses for d in usage.days] == [3, 0, 0, 0]
        assert [t["lifetime_uses"] for t in ledger.state("s1")["top_tools"]] == [3]


def test_a_now_before_the_first_event_is_refused(timed: Ledger, clock: StepClock) -> None:
    write_usage_log(timed, clock, FIRST, days=2)
    head = timed.head()
    with pytest.raises(LedgerError, match=r"^now 2026-03-01T00:59:59Z is before the log's "
                                          r"first event \(2026-03-02T01:00:00Z\)"):
        timed.rollup(at(FIRST, 1) - timedelta(days=1, seconds=1))
    assert timed.head() == head


# -- the cost follows the days with data ----------------------------------------------------


def test_an_empty_stretch_is_one_event_whatever_its_length(timed: Ledger,
                                                          clock: StepClock) -> None:
    write_usage_log(timed, clock, FIRST, days=3)  # 03-04 has no data
    clock.now = at(FIRST + timedelta(days=3), 1)
    started = time.monotonic()
    report = run_rollup(timed.log, timed.clock, now=datetime(9998, 12, 31, tzinfo=UTC),
                        future_now_for_tests=True)
    assert time.monotonic() - started < 30
    assert [(d.day, d.last_day) for d in report.rolled] == [
        ("2026-03-02", "2026-03-02"), ("2026-03-03", "2026-03-03"),
        ("2026-03-04", "9998-12-30")]
    assert [d.get("last_day") for d in rollup_data(timed)] == [None, None, "9998-12-30"]
    head = timed.head()
    again = run_rollup(timed.log, timed.clock, now=datetime(9998, 12, 31, tzinfo=UTC),
                       future_now_for_tests=True)
    assert again.rolled == again.rerolled == [] and timed.head() == head
    assert_projections_equal_rebuild(timed)


def test_days_with_only_uncounted_events_join_the_empty_stretch(timed: Ledger,
                                                               clock: StepClock) -> None:
    write_usage_log(timed, clock, FIRST, days=1)
    for offset in (2, 5):  # a setting on two later days: events, but no rows
        clock.now = at(FIRST + timedelta(days=offset), 4)
        timed.append("scope:alpha", {"type": "setting.changed",
                                     "data": {"key": "usage_window_days", "value": 7}})
    roll(timed, clock, at(FIRST + timedelta(days=9), 3))
    assert [(d["day"], d.get("last_day")) for d in rollup_data(timed)] == [
        ("2026-03-02", None), ("2026-03-03", "2026-03-10")]


# -- late events ----------------------------------------------------------------------------


def test_an_event_dated_in_a_rolled_day_is_rolled_up_again(timed: Ledger, clock: StepClock,
                                                           db_url: str,
                                                           tmp_path: Path) -> None:
    write_usage_log(timed, clock, FIRST, days=5)
    now = at(FIRST + timedelta(days=5), 3)
    roll(timed, clock, now)
    # Late: a use, a message and an assembly recorded inside 03-03 (a clock that stepped
    # back, an import with its own times), and a new tool on 03-04, an empty day.
    clock.now = at(FIRST + timedelta(days=1), 15)
    timed.append("s1", [{"type": "tool.used", "data": {"tool_name": "Edit"}},
                        {"type": "message.appended", "data": {"role": "user", "content": "l"}}])
    clock.now = at(FIRST + timedelta(days=2), 7)
    timed.append("s1", {"type": "tool.used", "data": {"tool_name": "Grep"}})
    clock.now = now

    # Read before the next run: usage already counts them.
    usage = timed.usage("alpha", days=6, now=now)  # 03-02 .. 03-07 (today)
    expected = figures_from_events(timed, before=now.date())
    tools = {s.name: s.daily for s in usage.tools}
    for offset in range(5):
        day = FIRST + timedelta(days=offset)
        assert usage.days[offset].appended == expected["appended"][("alpha", day)]
    assert (tools["Edit"], tools["Grep"]) == ([0, 1, 0, 0, 0, 0], [0, 0, 1, 0, 0, 0])
    assert [d.source for d in usage.days] == ["rollup", "raw", "raw", "rollup", "rollup",
                                              "raw"]

    report = timed.rollup()
    assert [d.day for d in report.rerolled] == ["2026-03-03", "2026-03-04"]
    assert report.rolled == []
    assert figures_from_rollups(timed) == figures_from_events(timed, before=now.date())
    assert figures_from_rollups(timed) == from_scratch(timed, db_url, tmp_path, now)
    after = timed.usage("alpha", days=6, now=now)
    assert [d.source for d in after.days] == ["rollup"] * 5 + ["raw"]
    assert after.model_dump(exclude={"days"}) == usage.model_dump(exclude={"days"})
    assert ([d.model_dump(exclude={"source"}) for d in after.days]
            == [d.model_dump(exclude={"source"}) for d in usage.days])

    head = timed.head()
    again = timed.rollup()
    assert again.rolled == again.rerolled == [] and timed.head() == head
    assert_projections_equal_rebuild(timed)


def test_a_late_event_that_changes_no_figure_writes_nothing(timed: Ledger,
                                                           clock: StepClock) -> None:
    write_usage_log(timed, clock, FIRST, days=3)
    now = at(FIRST + timedelta(days=3), 3)
    roll(timed, clock, now)
    clock.now = at(FIRST, 12)
    timed.append("scope:alpha", {"type": "setting.changed",
                                 "data": {"key": "usage_window_days", "value": 9}})
    head = timed.head()
    clock.now = now
    assert timed.rollup().rerolled == [] and timed.head() == head


def test_a_late_use_in_a_pruned_day_adds_to_its_rolled_up_count(timed: Ledger,
                                                               clock: StepClock,
                                                               db_url: str,
                                                               tmp_path: Path) -> None:
    timed.append("s1", {"type": "session.started", "data": {"scope": "alpha"}})
    for offset in range(40):
        clock.now = at(FIRST + timedelta(days=offset), 10)
        timed.append("s1", {"type": "tool.used", "data": {"tool_name": f"t{offset % 2}"}})
        if offset == 1:
            timed.append("s1", {"type": "tool.used", "data": {"tool_name": "t2"}})
    now = at(FIRST + timedelta(days=40), 3)
    roll(timed, clock, now)
    # 03-03 (a day of t1 and t2) is long pruned; late uses arrive there: t2's first
    # ones were that day and at its last use, a new tool's now.
    clock.now = at(FIRST + timedelta(days=1), 11)
    timed.append("s1", [{"type": "tool.used", "data": {"tool_name": "t2"}},
                        {"type": "tool.used", "data": {"tool_name": "new"}}])
    clock.now = now
    read = {s.name: s.daily for s in timed.usage("alpha", days=41, now=now).tools}
    assert (read["t1"][1], read["t2"][1], read["new"][1]) == (1, 2, 1)
    report = timed.rollup()
    assert [d.day for d in report.rerolled] == ["2026-03-03"]
    assert figures_from_rollups(timed) == figures_from_events(timed, before=now.date())
    assert figures_from_rollups(timed) == from_scratch(timed, db_url, tmp_path, now)
    head = timed.head()
    assert timed.rollup().rerolled == [] and timed.head() == head
    assert_projections_equal_rebuild(timed)


def test_events_older_than_every_rolled_day_are_rolled_up(timed: Ledger, clock: StepClock,
                                                         db_url: str,
                                                         tmp_path: Path) -> None:
    write_usage_log(timed, clock, FIRST, days=3)
    now = at(FIRST + timedelta(days=3), 3)
    roll(timed, clock, now)
    clock.now = at(FIRST - timedelta(days=4), 9)  # an import of an older history
    timed.append("s1", {"type": "message.appended", "data": {"role": "user", "content": "o"}})
    clock.now = now
    report = timed.rollup()
    assert [(d.day, d.last_day) for d in report.rolled] == [
        ("2026-02-26", "2026-02-26"), ("2026-02-27", "2026-03-01")]
    assert figures_from_rollups(timed) == figures_from_events(timed, before=now.date())
    assert figures_from_rollups(timed) == from_scratch(timed, db_url, tmp_path, now)


def test_a_late_event_inside_an_empty_stretch_keeps_the_stretch_rolled(
        timed: Ledger, clock: StepClock) -> None:
    write_usage_log(timed, clock, FIRST, days=1)
    now = at(FIRST + timedelta(days=10), 3)
    roll(timed, clock, now)
    clock.now = at(FIRST + timedelta(days=1), 5)  # the first day of the stretch
    timed.append("s1", {"type": "tool.used", "data": {"tool_name": "Grep"}})
    clock.now = now
    report = timed.rollup()
    assert [d.day for d in report.rerolled] == ["2026-03-03"] and report.rolled == []
    head = timed.head()
    assert timed.rollup().rolled == [] and timed.head() == head
    usage = timed.usage("alpha", days=11, now=now)
    assert [d.source for d in usage.days] == ["rollup"] * 10 + ["raw"]
    assert [d.tool_uses for d in usage.days][1:3] == [1, 0]


def test_a_late_use_is_rolled_up_on_its_own_day(timed: Ledger, clock: StepClock) -> None:
    """An out-of-order use is counted at its own time (the tool-usage projection keeps it
    apart from the in-order uses): the rollup re-rolls its own day, and follows the raw
    rows of both tables."""
    write_usage_log(timed, clock, FIRST, days=4)
    now = at(FIRST + timedelta(days=4), 3)
    roll(timed, clock, now)
    before = figures_from_rollups(timed)["tools"][("alpha", "Read", FIRST)]
    clock.now = at(FIRST, 20)  # Read was used on every later day
    timed.append("s1", {"type": "tool.used", "data": {"tool_name": "Read"}})
    clock.now = now
    assert [d.day for d in timed.rollup().rerolled] == [FIRST.isoformat()]
    raw: Counter[tuple[str, str, date]] = Counter()
    with timed.engine.connect() as conn:
        for table in USE_TABLES:
            raw.update((r.scope, r.tool_name, r.used_at.date()) for r in conn.execute(
                sa.select(table.c.scope, table.c.tool_name, table.c.used_at)))
    rolled = figures_from_rollups(timed)["tools"]
    assert rolled == raw
    assert rolled[("alpha", "Read", FIRST)] == before + 1
