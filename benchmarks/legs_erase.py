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
latency during the erase against its p99 with no erase running, side by side.
"""

from __future__ import annotations

import statistics
import threading
import time
from typing import Any

from legs_append import ledger_url, timed
from legs_pg_writers import PG_URL, _check_local, _reachable, _schema, _schema_url
from legs_seal import _fill
from registry import AtMost, AtMostTimesPeer, Comparison, Context, Measure, leg

from ctxledger import Ledger

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


class _Writer(threading.Thread):
    """Appends one message at a time to a session of scope ``other`` until stopped,
    keeping each append's latency (ms) with the time it started."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.samples: list[tuple[float, float]] = []
        self.stop = threading.Event()
        self.ready = threading.Event()

    def run(self) -> None:
        with Ledger.open(self.url, load_vocabulary=False) as ledger:
            ledger.append("writer", [{"type": "session.started", "data": {"scope": "other"}}])
            ledger.append_messages("writer", [{"role": "user", "content": "warm up"}])
            self.ready.set()
            n = 0
            while not self.stop.is_set():
                start = time.perf_counter()
                ledger.append_messages("writer", [{"role": "user", "content": f"m {n}"}])
                self.samples.append((start, (time.perf_counter() - start) * 1_000))
                n += 1
                time.sleep(0.002)


def _p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] if ordered else 0.0


@leg("erase_pg", "erasing a session on PostgreSQL while another scope appends")
def erase_pg(ctx: Context) -> list[Comparison]:
    """p99 of another scope's appends during an erase, against the same writer's p99
    with no erase; and the erase's own time."""
    _check_local(PG_URL)
    problem = _reachable()
    if problem is not None:
        print(f"  skipped: PostgreSQL not reachable at {PG_URL} ({problem})")
        return []
    size = 500 if ctx.settings.quick else SESSION
    others = 5_000 if ctx.settings.quick else PG_LOG
    during: list[float] = []
    before: list[float] = []
    worst: list[float] = []
    erase_ms: list[float] = []
    for _ in range(ctx.settings.rounds):
        with _schema() as schema:
            url = _schema_url(schema)
            with Ledger.open(url, load_vocabulary=False) as ledger:
                _pg_fill(ledger, others)
                _append_session(ledger, size)
                writer = _Writer(url)
                writer.start()
                writer.ready.wait(60)
                time.sleep(BASELINE_SECONDS)
                began = time.perf_counter()
                done = ledger.erase(session="erased", reason="benchmark")
                ended = time.perf_counter()
                time.sleep(0.2)
                writer.stop.set()
                writer.join(60)
                assert done.events == size
            base = [ms for at, ms in writer.samples if at < began]
            # An append that started during the erase, or was waiting when it began.
            hit = [ms for at, ms in writer.samples if began <= at + ms / 1_000 and at < ended]
            before.append(_p99(base))
            during.append(_p99(hit))
            worst.append(max(hit, default=0.0))
            erase_ms.append((ended - began) * 1_000)
    note = (f"a {size:,}-message session erased from a {others + size:,}-event PostgreSQL log;"
            f" the writer's worst append during it: {max(worst):,.0f} ms; the erase took"
            f" {statistics.median(erase_ms):,.0f} ms")
    return [
        Comparison("erase_pg", "another scope's append p99 during an erase (PostgreSQL)",
                   Measure.median_of(during, "ms"), "its p99 with no erase",
                   Measure.median_of(before, "ms"), AtMostTimesPeer(3.0), note),
        Comparison("erase_pg", "another scope's worst append during an erase (PostgreSQL)",
                   Measure.median_of(worst, "ms"), None, None, AtMost(100.0 + max(before),
                                                                   "ms"),
                   "a lock held by the erase shows here as the wait it caused"),
    ]

