"""``ctxledger scheduler``: the nightly usage rollup on APScheduler 3, in the foreground.

- A ``BlockingScheduler`` with ``timezone=UTC`` and one ``CronTrigger`` (default 03:00
  UTC, also ``timezone=UTC``).
- The job lives in the ledger's own database through a ``SQLAlchemyJobStore`` on an
  engine of its own; its table (``apscheduler_jobs``) is made by an Alembic migration.
- The job is stored as a module path (``JOB_FUNC``). Its arguments hold no URL, so no
  credentials end up pickled in the table: the process that runs it says where the
  ledger is (``run_scheduler`` sets it; ``$CTXLEDGER_DB`` otherwise).
- ``coalesce=True``, ``max_instances=1``, ``misfire_grace_time=None``: a start after
  missed nights runs the job once, and the job catches up every missing day.
- The job is added only when it is not stored yet: ``replace_existing=True`` would
  compute a new next run time and erase a missed night.
- Two schedulers on one database cannot roll a day up twice: the job takes the rollup
  lock per day and ``rollup.completed`` ids are derived from the day.
- SIGINT and SIGTERM stop it cleanly: a running catch-up stops between two days (each
  day is its own transaction), then the scheduler shuts down.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, date, datetime
from types import FrameType
from typing import Any, Literal

from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.jobstores.base import ConflictingIdError
from apscheduler.jobstores.sqlalchemy import SQLAlchemyJobStore
from apscheduler.schedulers.base import BaseScheduler
from apscheduler.schedulers.blocking import BlockingScheduler
from apscheduler.triggers.cron import CronTrigger
from pydantic import BaseModel, ConfigDict, Field

from ctxledger._config import DEFAULT_RETENTION_DAYS, resolve_db_url
from ctxledger._ledger import Ledger
from ctxledger.jobs._rollup import RollupPolicy, run_rollup
from ctxledger.store.sql_engine import create_engine

JOBS_TABLE = "apscheduler_jobs"
"""The job store's table (created by migration 0004)."""
JOB_ID = "ctxledger.nightly_rollup"
JOB_FUNC = "ctxledger.scheduler:nightly_rollup"
"""The job's callable as a module path: the pickled job names code, not an object."""
JOB_OPTIONS: dict[str, Any] = {"coalesce": True, "max_instances": 1,
                               "misfire_grace_time": None}

log = logging.getLogger("ctxledger.scheduler")
_editor_log = logging.getLogger("ctxledger.scheduler.editor")
_editor_log.setLevel(logging.WARNING)  # its start/stop lines are not the service's


class SchedulerSettings(BaseModel):
    """When the nightly rollup runs (UTC) and what it keeps."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    hour: int = Field(default=3, ge=0, le=23)
    minute: int = Field(default=0, ge=0, le=59)
    retention_days: int = Field(default=DEFAULT_RETENTION_DAYS, ge=1)

    def job_kwargs(self) -> dict[str, Any]:
        """The stored job's arguments: plain numbers, never a URL or a credential."""
        return {"retention_days": self.retention_days}


def rollup_trigger(settings: SchedulerSettings) -> CronTrigger:
    """Every day at ``settings.hour:minute`` UTC."""
    return CronTrigger(hour=settings.hour, minute=settings.minute, timezone=UTC)


def job_store(url: str) -> SQLAlchemyJobStore:
    """A job store on the ledger's database, with an engine of its own."""
    return SQLAlchemyJobStore(engine=create_engine(url), tablename=JOBS_TABLE)


# -- the job -----------------------------------------------------------------------------------

_ledger_url: str | None = None
_stop = threading.Event()


def nightly_rollup(retention_days: int = DEFAULT_RETENTION_DAYS) -> None:
    """The scheduled job: roll up every complete day not rolled up yet, then prune."""
    url = _ledger_url or resolve_db_url(None)
    with Ledger.open(url) as ledger:
        report = run_rollup(ledger.log, ledger.clock, should_stop=_stop.is_set,
                            policy=RollupPolicy(retention_days=retention_days))
    spans = report.rolled
    span = f" ({spans[0].day} .. {spans[-1].last_day})" if spans else ""
    days = sum((date.fromisoformat(d.last_day) - date.fromisoformat(d.day)).days + 1
               for d in spans)
    log.info("rollup: %d day(s) rolled up%s, %d rolled up again, %d done elsewhere,"
             " retention %d days%s", days, span, len(report.rerolled), len(report.skipped),
             report.retention_days, "; stopped early" if report.stopped else "")


# -- the scheduler -----------------------------------------------------------------------------


class _JobEditor(BaseScheduler):  # type: ignore[misc]
    """A scheduler that never runs anything: APScheduler's API over the job store only.

    A paused ``BackgroundScheduler`` would do, except that its thread, woken by an edit
    while it shuts down, may process an overdue job and so move a missed night away.
    """

    def shutdown(self, wait: bool = True) -> None:
        """Stop the job store (and the unused executor)."""
        super().shutdown(wait)

    def wakeup(self) -> None:
        """Nothing to wake: no thread runs jobs here."""


@contextmanager
def job_editor(url: str) -> Iterator[BaseScheduler]:
    """APScheduler's job API (``get_job``, ``add_job``, ``modify_job``) on the ledger's
    job store, with nothing ever run."""
    editor = _JobEditor(timezone=UTC, jobstores={"default": job_store(url)},
                        logger=_editor_log)
    editor.start(paused=True)
    try:
        yield editor
    finally:
        editor.shutdown(wait=False)


def ensure_job(url: str, settings: SchedulerSettings,
               ) -> tuple[Literal["added", "kept", "updated"], datetime | None]:
    """Store the rollup job unless it is stored already; returns what was done and the
    job's next run time. A stored job keeps its next run time (a missed night stays
    due); a changed time of day or retention is written without moving it."""
    trigger = rollup_trigger(settings)
    with job_editor(url) as helper:
        job = helper.get_job(JOB_ID)
        if job is None:
            try:
                job = helper.add_job(JOB_FUNC, trigger, id=JOB_ID, name="nightly usage rollup",
                                     kwargs=settings.job_kwargs(), replace_existing=False,
                                     **JOB_OPTIONS)
                return "added", job.next_run_time
            except ConflictingIdError:  # another scheduler stored it a moment ago
                job = helper.get_job(JOB_ID)
                return "kept", None if job is None else job.next_run_time
        if str(job.trigger) == str(trigger) and job.kwargs == settings.job_kwargs():
            return "kept", job.next_run_time
        job = helper.modify_job(JOB_ID, trigger=trigger, kwargs=settings.job_kwargs(),
                                **JOB_OPTIONS)
        return "updated", job.next_run_time


class _Shutdown(Exception):
    """Raised in the main thread by SIGINT/SIGTERM to leave ``BlockingScheduler.start``."""


@contextmanager
def _stop_on_signals() -> Iterator[None]:
    def handler(signum: int, _frame: FrameType | None) -> None:
        first = not _stop.is_set()
        _stop.set()  # a running catch-up stops after its current day
        if first:  # a second signal must not break the shutdown under way
            raise _Shutdown(signal.Signals(signum).name)

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def run_scheduler(url: str, settings: SchedulerSettings | None = None) -> None:
    """Run the nightly rollup until SIGINT or SIGTERM (blocks; call from the main thread).

    The ledger at ``url`` must exist at the current schema (``Ledger.open`` does that).
    """
    global _ledger_url
    chosen = settings or SchedulerSettings()
    _ledger_url = url
    _stop.clear()
    outcome, next_run = ensure_job(url, chosen)
    log.info("job %s %s; next run %s (daily at %02d:%02d UTC)", JOB_ID, outcome,
             next_run.isoformat() if next_run else "none", chosen.hour, chosen.minute)
    scheduler = BlockingScheduler(
        timezone=UTC, jobstores={"default": job_store(url)},
        executors={"default": ThreadPoolExecutor(max_workers=1)}, job_defaults=JOB_OPTIONS)
    with _stop_on_signals():
        try:
            scheduler.start()
        except _Shutdown as exc:
            log.info("%s received; shutting down", exc)
        finally:
            _stop.set()
            if scheduler.running:
                scheduler.shutdown(wait=True)
    log.info("scheduler stopped")
