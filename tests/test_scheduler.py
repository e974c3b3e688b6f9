"""The nightly scheduler: its trigger, its stored job, and real starts against real databases.

No live scheduler runs under freezegun (it ignores threads): the trigger is checked with
``get_next_fire_time``, and live schedulers run in child processes on the real clock,
with a log written days in the past through an explicit clock.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import UTC, date, datetime, timedelta

import pytest
import sqlalchemy as sa
from apscheduler.job import Job
from helpers.usage_log import (
    StepClock,
    figures_from_events,
    figures_from_rollups,
    rollup_events,
    write_usage_log,
)

from ctxledger import Ledger
from ctxledger._config import ENV_VAR
from ctxledger.jobs._scheduler import (
    JOB_FUNC,
    JOB_ID,
    JOBS_TABLE,
    SchedulerSettings,
    ensure_job,
    job_editor,
    rollup_trigger,
)
from ctxledger.store.sql_engine import create_engine

HANG_GUARD_SECONDS = 120


def test_the_trigger_fires_every_day_at_three_utc() -> None:
    trigger = rollup_trigger(SchedulerSettings())
    assert trigger.timezone.utcoffset(None) == timedelta(0)
    assert str(trigger.timezone) == "UTC"
    before = datetime(2026, 3, 1, 2, 59, 59, tzinfo=UTC)
    assert trigger.get_next_fire_time(None, before) == datetime(2026, 3, 1, 3, 0, tzinfo=UTC)
    after = datetime(2026, 3, 1, 3, 0, 1, tzinfo=UTC)
    assert trigger.get_next_fire_time(None, after) == datetime(2026, 3, 2, 3, 0, tzinfo=UTC)
    # A "now" in another zone is the same instant: still 03:00 UTC.
    tokyo = datetime(2026, 3, 1, 12, 30, tzinfo=UTC).astimezone(
        datetime.now().astimezone().tzinfo)
    assert trigger.get_next_fire_time(None, tokyo) == datetime(2026, 3, 2, 3, 0, tzinfo=UTC)


def test_the_time_of_day_is_a_setting() -> None:
    trigger = rollup_trigger(SchedulerSettings(hour=22, minute=30))
    now = datetime(2026, 12, 31, 23, 0, tzinfo=UTC)
    assert trigger.get_next_fire_time(None, now) == datetime(2027, 1, 1, 22, 30, tzinfo=UTC)


def stored_job(url: str) -> Job:
    with job_editor(url) as scheduler:
        job = scheduler.get_job(JOB_ID)
    assert job is not None
    return job


def miss_nights(url: str, nights: int) -> datetime:
    """Make the stored job's next run ``nights`` days overdue, as if the host was down."""
    overdue = datetime.now(UTC).replace(microsecond=0) - timedelta(days=nights)
    with job_editor(url) as scheduler:
        scheduler.modify_job(JOB_ID, next_run_time=overdue)
    return overdue


def test_the_job_is_stored_once_by_module_path_without_credentials(db_url: str) -> None:
    Ledger.open(db_url).close()  # the migration makes the job table
    outcome, next_run = ensure_job(db_url, SchedulerSettings())
    assert outcome == "added"
    assert next_run is not None and next_run > datetime.now(UTC)
    assert next_run.hour == 3 and next_run.minute == 0
    job = stored_job(db_url)
    assert (job.func_ref, job.args, job.kwargs) == (JOB_FUNC, (), {"retention_days": 30})
    assert (job.coalesce, job.max_instances, job.misfire_grace_time) == (True, 1, None)
    engine = create_engine(db_url)
    try:
        with engine.connect() as conn:
            blobs = conn.execute(sa.text(f"SELECT job_state FROM {JOBS_TABLE}")).scalars().all()
    finally:
        engine.dispose()
    assert len(blobs) == 1
    blob = bytes(blobs[0])
    assert JOB_FUNC.encode() in blob
    for secret in (db_url, sa.engine.make_url(db_url).database or "", "postgres", "sqlite"):
        assert secret.encode() not in blob, secret


def test_a_stored_job_keeps_its_missed_night(db_url: str) -> None:
    Ledger.open(db_url).close()
    ensure_job(db_url, SchedulerSettings())
    overdue = miss_nights(db_url, 2)
    assert ensure_job(db_url, SchedulerSettings()) == ("kept", overdue)
    # A new time of day or retention is stored without moving the overdue run.
    outcome, next_run = ensure_job(db_url, SchedulerSettings(hour=4, retention_days=40))
    assert (outcome, next_run) == ("updated", overdue)
    job = stored_job(db_url)
    assert job.kwargs == {"retention_days": 40}
    assert job.trigger.get_next_fire_time(None, overdue).hour == 4


# -- live schedulers and concurrent jobs, in child processes ---------------------------------


def cli(url: str, *args: str) -> list[str]:
    return [sys.executable, "-m", "ctxledger.cli", "--db", url, *args]


def child_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != ENV_VAR}
    env["COLUMNS"] = "160"
    return env


def days_log(url: str, first: date, days: int) -> None:
    clock = StepClock(datetime.combine(first, datetime.min.time(), UTC))
    with Ledger.open(url, clock=clock) as ledger:
        write_usage_log(ledger, clock, first, days=days)


def wait_for(predicate: object, what: str) -> None:
    deadline = time.monotonic() + HANG_GUARD_SECONDS
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.slow
def test_a_started_scheduler_catches_up_missed_nights_once(db_url: str) -> None:
    first = datetime.now(UTC).date() - timedelta(days=5)
    days_log(db_url, first, days=4)  # days 0..3 have events; day 4 (yesterday) is empty
    Ledger.open(db_url).close()
    ensure_job(db_url, SchedulerSettings())
    miss_nights(db_url, 3)

    with Ledger.open(db_url) as ledger:
        proc = subprocess.Popen(cli(db_url, "scheduler"), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=child_env())
        try:
            def caught_up() -> bool:
                assert proc.poll() is None, proc.communicate()[1]
                done = ledger.events("system")
                return bool(done) and done[-1].data["day"] == (
                    done[-1].recorded_at.date() - timedelta(days=1)).isoformat()

            wait_for(caught_up, "the missed nights to be rolled up")
            time.sleep(1.0)  # a second run of the job (there must be none) would show now
            proc.send_signal(signal.SIGTERM)
            _out, err = proc.communicate(timeout=HANG_GUARD_SECONDS)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        assert proc.returncode == 0, err
        assert err.count("rollup: ") == 1, err  # one run catches up every night
        assert "SIGTERM received; shutting down" in err and "scheduler stopped" in err
        assert "Traceback" not in err

        rolled = ledger.events("system")
        today = rolled[-1].recorded_at.date()
        expected = [first + timedelta(days=i) for i in range((today - first).days)]
        assert [e[0] for e in rollup_events(ledger)] == [d.isoformat() for d in expected]
        assert figures_from_rollups(ledger) == figures_from_events(ledger, before=today)
        # The coalesced run moved the job to a coming night.
        next_run = stored_job(db_url).next_run_time
        assert next_run is not None and next_run > datetime.now(UTC)

        # A second run (here by hand) is a no-op.
        head = ledger.head()
        again = subprocess.run(cli(db_url, "rollup"), capture_output=True, text=True,
                               env=child_env(), timeout=HANG_GUARD_SECONDS)
        assert again.returncode == 0, again.stderr
        assert json.loads(again.stdout)["rolled"] == []
        assert ledger.head() == head


@pytest.mark.slow
def test_two_concurrent_rollups_give_one_event_per_day(db_url: str) -> None:
    # A year-long backlog: an empty stretch, then twenty days of data, which keep both
    # processes busy at once.
    first = date(2025, 1, 1)
    with Ledger.open(db_url, clock=lambda: datetime(2025, 1, 1, 8, tzinfo=UTC)) as ledger:
        ledger.append("s0", {"type": "session.started", "data": {"scope": "alpha"}})
    days_log(db_url, date(2026, 2, 1), days=20)
    now = "2026-02-21T03:00:00Z"
    procs = [subprocess.Popen(cli(db_url, "rollup", "--now", now), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=child_env())
             for _ in range(2)]
    results = [p.communicate(timeout=HANG_GUARD_SECONDS) for p in procs]
    for proc, (_out, err) in zip(procs, results, strict=True):
        assert proc.returncode == 0, err
    reports = [json.loads(out) for out, _ in results]
    expected = [first + timedelta(days=i) for i in range((date(2026, 2, 21) - first).days)]

    def days_of(spans: list[dict[str, str]]) -> list[date]:
        out = []
        for span in spans:
            day, last = date.fromisoformat(span["day"]), date.fromisoformat(span["last_day"])
            out += [day + timedelta(days=i) for i in range((last - day).days + 1)]
        return out

    by_each = [days_of(r["rolled"]) for r in reports]
    assert sorted(by_each[0] + by_each[1]) == expected  # every day by exactly one process
    if sa.engine.make_url(db_url).get_backend_name() == "postgresql":
        # The race was exercised: a process found days done by the other once it held the
        # lock, or both rolled some. (On SQLite the busy wait can starve the second
        # process until the first is done; test_rollup.py races two ledgers in-process.)
        assert any(r["skipped"] for r in reports) or all(by_each), reports
    with Ledger.open(db_url) as ledger:
        spans = [{"day": e.data["day"], "last_day": e.data.get("last_day", e.data["day"])}
                 for e in ledger.events("system")]
        assert sorted(days_of(spans)) == expected  # one event per day or empty stretch
        assert figures_from_rollups(ledger) == figures_from_events(ledger,
                                                                   before=date(2026, 2, 21))
