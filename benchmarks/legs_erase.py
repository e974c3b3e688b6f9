"""Erase legs: what erasing one session costs against the size of the log, and what it
costs the other scopes' writers on PostgreSQL.

``erase``: a session of ``SESSION`` messages erased from a log of that session alone, and
from a log of ``--events`` more events, on SQLite (``--events 1000000`` is the issue's
size). An erase forgets only what the session left (docs/erasure.md), so the two should
be close. The other sessions' events are inserted as raw rows (untimed, as the seal leg
does: writing a million events through appends would take minutes); the erased session
is appended for real.

``erase_pg``: the same session erased on PostgreSQL from a log of ``PG_LOG`` more
events, while a writer of another scope appends one message at a time; its p99 append
latency during the erase against its p99 with no erase running, side by side. The writer
runs in a process of its own, as another tenant's application does; the same writer as a
thread of the erasing process, and the erase with a ``VACUUM FULL`` scrub, are reported
beside it.
"""

from __future__ import annotations

import multiprocessing
import os
import queue
import statistics
import threading
import time
from typing import Any

import sqlalchemy as sa
from legs_append import ledger_url, timed
from legs_pg_writers import PG_URL, _check_local, _reachable, _schema, _schema_url
from legs_seal import _fill
from registry import AtMost, AtMostTimesPeer, Comparison, Context, Measure, Reported, leg

from ctxledger import Ledger
from ctxledger.store.backends.pg_scrub import REPACK_ENV

SESSION = 10_000
"""Messages in the erased session (the issue's 10k); the quick run uses 500."""
PG_LOG = 200_000
"""Events besides the erased session in the PostgreSQL leg's log; the quick run: 5,000."""
BASELINE_SECONDS = 3.0
"""How long the writer's latency is sampled with no erase running."""


def _messages(size: int) -> list[dict[str, Any]]:
    return [{"role": "user" if n % 2 == 0 else "assistant",
             "content": f"message {n} of the session to erase"} for n in range(size)]


def _append_session(ledger: Ledger, size: int) -> None:
    messages = _messages(size)
    for start in range(0, size, 1_000):
        ledger.append_messages("erased", messages[start:start + 1_000])


def _erase_time(ctx: Context, others: int, size: int) -> float:
    """Seconds to erase a ``size``-message session from a log with ``others`` more events."""
    with ctx.fresh_dir("ctxledger-erase") as directory, \
            Ledger.open(ledger_url(directory), load_vocabulary=False) as ledger:
        if others:
            _fill(ledger, 1, others, [f"other-{n}" for n in range(100)])
        _append_session(ledger, size)

        def run(ledger: Ledger = ledger) -> None:
            done = ledger.erase(session="erased", reason="benchmark")
            assert done.events == size

        return timed(run)


@leg("erase", "erasing a session on a small and a large log")
def erase(ctx: Context) -> list[Comparison]:
    """The same session's erase alone in its log and inside ``--events`` more events."""
    size = 500 if ctx.settings.quick else SESSION
    large = ctx.settings.events
    small_times: list[float] = []
    large_times: list[float] = []
    for _ in range(ctx.settings.rounds):
        small_times.append(_erase_time(ctx, 0, size) * 1_000)
        large_times.append(_erase_time(ctx, large, size) * 1_000)
    note = (f"a {size:,}-message session erased from a log of {size:,} events and from one"
            f" with {large:,} more; ratio: large / small (O(session) would be ~1x)")
    return [Comparison("erase", f"erase {size:,} events in a {large + size:,}-event log",
                       Measure.median_of(large_times, "ms"), f"{size:,}-event log",
                       Measure.median_of(small_times, "ms"), AtMostTimesPeer(2.0), note)]


# -- PostgreSQL: another scope's writer during the erase ----------------------------------

def _pg_fill(ledger: Ledger, count: int) -> None:
    """``count`` raw rows (100 streams, no content) copied into ``events``, untimed."""
    raw: Any = ledger.engine.raw_connection()
    try:
        cursor = raw.cursor()
        with cursor.copy("COPY events (stream_id, stream_version, event_id, type,"
                         " schema_version, data, metadata, recorded_at, prev_hash, hash)"
                         " FROM STDIN") as copy:
            for n in range(count):
                copy.write_row((f"other-{n % 100}", n // 100 + 1,
                                f"00000000-0000-4000-8000-{n:012d}", "session.ended", 1,
                                "{}", "{}", "2026-01-01 00:00:00+00", "0" * 64,
                                f"{n:064d}"))
        raw.commit()
        raw.driver_connection.autocommit = True  # VACUUM runs outside a transaction
        cursor.execute("VACUUM ANALYZE events")
        raw.driver_connection.autocommit = False
    finally:
        raw.close()


def _write_until_stopped(url: str, ready: Any, stop: Any, out: Any) -> None:
    """Append one message at a time to a session of scope ``other`` until ``stop`` is set;
    put each append's (start, latency in ms) on ``out``. Run in a thread of the erasing
    process or in a process of its own."""
    samples: list[tuple[float, float]] = []
    with Ledger.open(url, load_vocabulary=False) as ledger:
        ledger.append("writer", [{"type": "session.started", "data": {"scope": "other"}}])
        ledger.append_messages("writer", [{"role": "user", "content": "warm up"}])
        ready.set()
        n = 0
        while not stop.is_set():
            start = time.perf_counter()  # CLOCK_MONOTONIC: comparable across processes
            ledger.append_messages("writer", [{"role": "user", "content": f"m {n}"}])
            samples.append((start, (time.perf_counter() - start) * 1_000))
            n += 1
            time.sleep(0.002)
    out.put(samples)


def _p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] if ordered else 0.0


class _Run:
    """One erase of a ``size``-message session from a PostgreSQL log of ``others`` more
    events while a writer of another scope appends: in a process of its own (another
    tenant's application) or in a thread of the erasing process (one service process
    serving both, sharing its GIL)."""

    def __init__(self, others: int, size: int, *, process: bool, repack: bool) -> None:
        with _schema() as schema:
            url = _schema_url(schema)
            with Ledger.open(url, load_vocabulary=False) as ledger:
                _pg_fill(ledger, others)
                _append_session(ledger, size)
                samples, began, ended = self._erase_while_writing(ledger, url, size,
                                                                  process, repack)
        self.base = [ms for at, ms in samples if at < began]
        # An append that started during the erase, or was waiting when it began.
        self.hit = [ms for at, ms in samples if began <= at + ms / 1_000 and at < ended]
        self.erase_ms = (ended - began) * 1_000

    @staticmethod
    def _erase_while_writing(ledger: Ledger, url: str, size: int, process: bool,
                             repack: bool) -> tuple[list[tuple[float, float]], float, float]:
        kind: Any = multiprocessing.get_context("spawn") if process else None
        ready = kind.Event() if kind else threading.Event()
        stop = kind.Event() if kind else threading.Event()
        out = kind.Queue() if kind else queue.Queue()
        writer = (kind.Process if kind else threading.Thread)(
            target=_write_until_stopped, args=(url, ready, stop, out), daemon=True)
        writer.start()
        assert ready.wait(120), "the writer did not start"
        time.sleep(BASELINE_SECONDS)
        previous = os.environ.get(REPACK_ENV)
        if not repack:
            os.environ[REPACK_ENV] = "off"
        try:
            began = time.perf_counter()
            done = ledger.erase(session="erased", reason="benchmark")
            ended = time.perf_counter()
        finally:
            if previous is None:
                os.environ.pop(REPACK_ENV, None)
            else:
                os.environ[REPACK_ENV] = previous
        time.sleep(0.2)
        stop.set()
        samples: list[tuple[float, float]] = out.get(timeout=120)
        writer.join(60)
        assert done.events == size
        return samples, began, ended


@leg("erase_pg", "erasing a session on PostgreSQL while another scope appends")
def erase_pg(ctx: Context) -> list[Comparison]:
    """p99 of another scope's appends during an erase, against the same writer's p99
    with no erase; the writer in another process, and (reported) in a thread of the
    erasing process; and the worst append under a ``VACUUM FULL`` scrub."""
    _check_local(PG_URL)
    problem = _reachable()
    if problem is not None:
        print(f"  skipped: PostgreSQL not reachable at {PG_URL} ({problem})")
        return []
    size = 500 if ctx.settings.quick else SESSION
    others = 5_000 if ctx.settings.quick else PG_LOG
    online = _online_scrub()
    runs: dict[str, list[_Run]] = {"process": [], "thread": [], "vacuum": []}
    for _ in range(ctx.settings.rounds):
        runs["process"].append(_Run(others, size, process=True, repack=True))
        runs["thread"].append(_Run(others, size, process=False, repack=True))
        runs["vacuum"].append(_Run(others, size, process=True, repack=False))

    def median(name: str, figure: Any) -> Measure:
        return Measure.median_of([figure(run) for run in runs[name]], "ms")

    log = f"a {size:,}-message session erased from a {others + size:,}-event PostgreSQL log"
    scrub = "online (pg_repack)" if online else "VACUUM FULL: pg_repack is not installed here"
    erase_ms = statistics.median(run.erase_ms for run in runs["process"])
    worst = max(max(run.hit, default=0.0) for run in runs["process"])
    return [
        Comparison("erase_pg", "another scope's append p99 during an erase (PostgreSQL)",
                   median("process", lambda r: _p99(r.hit)), "its p99 with no erase",
                   median("process", lambda r: _p99(r.base)), AtMostTimesPeer(3.0),
                   f"{log}, scrubbed {scrub}; the writer is another process; the erase took"
                   f" {erase_ms:,.0f} ms"),
        Comparison("erase_pg", "another scope's worst append during an erase (PostgreSQL)",
                   median("process", lambda r: max(r.hit, default=0.0)), None, None,
                   AtMost(100.0 + max(_p99(r.base) for r in runs["process"]), "ms"),
                   f"a lock held by the erase shows here as the wait it caused; worst of"
                   f" all rounds: {worst:,.0f} ms"),
        Comparison("erase_pg", "... the writer a thread of the erasing process: p99",
                   median("thread", lambda r: _p99(r.hit)), "its p99 with no erase",
                   median("thread", lambda r: _p99(r.base)), Reported(),
                   "one process erasing and appending: the erase's Python holds the GIL"
                   " the writer's thread waits for"),
        Comparison("erase_pg", "... the scrub by VACUUM FULL: worst append",
                   median("vacuum", lambda r: max(r.hit, default=0.0)), None, None, Reported(),
                   f"{REPACK_ENV}=off: each table's rewrite holds it"),
    ]


def _online_scrub() -> bool:
    """Whether an erase in the benchmark's database scrubs online."""
    import psycopg

    from ctxledger.store.backends.pg_scrub import online_scrub_available

    url = sa.engine.make_url(PG_URL).set(drivername="postgresql")
    with psycopg.connect(url.render_as_string(hide_password=False)) as conn:
        return online_scrub_available(conn)
