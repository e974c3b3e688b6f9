"""Concurrent writers (threads and processes) with a reader tailing by position.

Each writer appends 1,000 events in batches of 10 to its own stream while the test's
thread tails the log with ``read_all(after=last)``. A reader that tails by position only
ever asks for positions above the last one it saw, so if an event became visible after a
higher position had been read (insert order != commit order) the tailer would never see
it, and its final list would not equal the log.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
import sqlalchemy as sa
from helpers.processes import HANG_GUARD_SECONDS, Child
from helpers.tables import assert_projections_equal_rebuild

from ctxledger import AppendResult, ConcurrencyError, Ledger
from ctxledger._migrate import current_revision, head_revision

EVENTS_PER_WRITER = 1000
BATCH = 10


def message_batch(stream: str, first: int, size: int) -> list[dict[str, Any]]:
    """Messages ``first .. first+size-1`` of ``stream``; the content names each one."""
    return [{"type": "message.appended",
             "data": {"role": "user", "content": f"{stream} #{n}"}}
            for n in range(first, first + size)]


@dataclass
class Tailer:
    """Follows the log by position, as a catch-up subscriber would."""

    ledger: Ledger
    seen: list[int] = field(default_factory=list)
    regressions: list[tuple[int, int]] = field(default_factory=list)
    last: int = 0

    def poll(self) -> int:
        """Read everything after the last position seen; returns how many were new."""
        events = self.ledger.log.read_all(after=self.last, limit=250)
        for event in events:
            if event.position <= self.last:
                self.regressions.append((self.last, event.position))
            self.last = max(self.last, event.position)
            self.seen.append(event.position)
        return len(events)

    def follow(self, finished: Callable[[], bool]) -> None:
        """Poll until the writers are finished and a read after that finds nothing new."""
        while True:
            done = finished()  # sampled BEFORE the read, so that read sees every commit
            if self.poll() == 0:
                if done:
                    return
                time.sleep(0.002)


def check_outcome(ledger: Ledger, tailer: Tailer, streams: Sequence[str],
                  batches: Sequence[Sequence[int]]) -> None:
    """Every assertion shared by the thread and process variants."""
    assert tailer.regressions == []
    logged = [e.position for e in ledger.log.read_all()]
    assert len(logged) == len(streams) * EVENTS_PER_WRITER
    assert tailer.seen == logged, "the tailer missed or repeated events"
    assert logged == sorted(set(logged))
    assert len(batches) == len(streams) * EVENTS_PER_WRITER // BATCH
    for positions in batches:
        # A batch is one transaction: no other writer's events fall inside its range.
        assert list(positions) == list(range(positions[0], positions[0] + BATCH))
    assert sorted(p for positions in batches for p in positions) == logged
    for stream in streams:
        events = ledger.log.read_stream(stream)
        assert [e.stream_version for e in events] == list(range(1, EVENTS_PER_WRITER + 1))
        assert [e.data["content"] for e in events] == [
            f"{stream} #{n}" for n in range(1, EVENTS_PER_WRITER + 1)]
    report = ledger.verify()
    assert report.ok, report.problems
    assert report.events == len(logged)
    with ledger.engine.connect() as conn:
        totals: dict[str, int] = dict(conn.execute(sa.text(
            "SELECT stream_id, messages_total FROM sessions ORDER BY stream_id")).all())
    assert totals == {stream: EVENTS_PER_WRITER for stream in streams}
    assert_projections_equal_rebuild(ledger)


@pytest.mark.slow
def test_thread_writers_with_a_tailing_reader(db_url: str) -> None:
    streams = ("writer-a", "writer-b")
    batches: list[tuple[int, ...]] = []
    errors: list[BaseException] = []
    start = threading.Barrier(len(streams))

    with Ledger.open(db_url) as ledger:
        def write(stream: str) -> None:
            try:
                start.wait()
                for first in range(1, EVENTS_PER_WRITER + 1, BATCH):
                    result = ledger.append(stream, message_batch(stream, first, BATCH))
                    batches.append(result.positions)
            except BaseException as exc:  # reported by the main thread
                errors.append(exc)

        writers = [threading.Thread(target=write, args=(s,)) for s in streams]
        for thread in writers:
            thread.start()
        tailer = Tailer(ledger)
        tailer.follow(lambda: not any(t.is_alive() for t in writers))
        for thread in writers:
            thread.join()
        assert errors == []
        check_outcome(ledger, tailer, streams, batches)


class WriterProcess(Child):
    """A writer appending ``batches`` batches of ``BATCH`` messages to its own stream."""

    def __init__(self, url: str, stream: str, *, batches: int = EVENTS_PER_WRITER // BATCH,
                 wait_for_go: bool = True) -> None:
        self.stream = stream
        super().__init__(url, stream, "--batches", str(batches), "--batch-size", str(BATCH),
                         "--tag", stream, *(["--wait-for-go"] if wait_for_go else []))

    def acked_batches(self) -> list[tuple[int, ...]]:
        """Wait for the child; return the positions of every batch it acknowledged."""
        return [tuple(r["ack"]["positions"]) for r in self.finish() if "ack" in r]


@pytest.mark.slow
def test_process_writers_with_a_tailing_reader(db_url: str) -> None:
    streams = ("proc-a", "proc-b")
    with Ledger.open(db_url) as ledger:  # creates the schema before the children open it
        children = [WriterProcess(db_url, stream) for stream in streams]
        try:
            for child in children:
                assert child.ready.wait(HANG_GUARD_SECONDS)
            for child in children:
                child.go()
            tailer = Tailer(ledger)
            tailer.follow(lambda: all(c.proc.poll() is not None for c in children))
            batches = [b for child in children for b in child.acked_batches()]
        finally:
            for child in children:
                child.kill()
        check_outcome(ledger, tailer, streams, batches)


@pytest.mark.slow
def test_processes_creating_the_same_database_at_once(empty_db_url: str) -> None:
    """Several processes open a database that does not exist yet, then all write to it."""
    db_url = empty_db_url
    streams = ("first-a", "first-b", "first-c")
    children = [WriterProcess(db_url, s, batches=5, wait_for_go=False) for s in streams]
    try:
        batches = [b for child in children for b in child.acked_batches()]
    finally:
        for child in children:
            child.kill()
    assert len(batches) == 5 * len(streams)
    with Ledger.open(db_url) as ledger:
        assert current_revision(ledger.engine) == head_revision()
        for stream in streams:
            assert [e.stream_version for e in ledger.log.read_stream(stream)] == list(
                range(1, 5 * BATCH + 1))
        assert sorted(p for b in batches for p in b) == [
            e.position for e in ledger.log.read_all()]
        assert ledger.verify().ok
        assert_projections_equal_rebuild(ledger)


def race(ledger: Ledger, attempt: Callable[[], AppendResult],
         contenders: int = 2) -> list[AppendResult | BaseException]:
    """Run ``attempt`` in ``contenders`` threads released together by a barrier."""
    barrier = threading.Barrier(contenders)
    outcomes: list[AppendResult | BaseException] = []
    lock = threading.Lock()

    def run() -> None:
        barrier.wait()
        try:
            outcome: AppendResult | BaseException = attempt()
        except BaseException as exc:  # collected and asserted on by the caller
            outcome = exc
        with lock:
            outcomes.append(outcome)

    threads = [threading.Thread(target=run) for _ in range(contenders)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return outcomes


@pytest.mark.slow
def test_same_expected_version_from_two_writers(db_url: str) -> None:
    with Ledger.open(db_url) as ledger:
        ledger.append("shared", {"type": "session.started", "data": {}}, expected_version=0)
        before = ledger.head()
        outcomes = race(ledger, lambda: ledger.append(
            "shared", message_batch("shared", 1, 2), expected_version=1))
        wins = [o for o in outcomes if isinstance(o, AppendResult)]
        losses = [o for o in outcomes if isinstance(o, ConcurrencyError)]
        assert len(wins) == 1 and len(losses) == 1, outcomes
        assert (losses[0].expected, losses[0].actual) == (1, 3)
        assert "actual version 3" in str(losses[0])
        # Only the winner's batch was written.
        assert ledger.head() == before + 2 and ledger.log.stream_version("shared") == 3
        assert ledger.verify().ok


@pytest.mark.slow
def test_racing_writers_on_expected_version_repeatedly(db_url: str) -> None:
    with Ledger.open(db_url) as ledger:
        version = ledger.append("shared", {"type": "session.started", "data": {}},
                                expected_version=0).stream_version
        for _ in range(15):
            current = version

            def attempt(current: int = current) -> AppendResult:
                return ledger.append("shared", message_batch("shared", current, 1),
                                     expected_version=current)

            outcomes = race(ledger, attempt)
            wins = [o for o in outcomes if isinstance(o, AppendResult)]
            losses = [o for o in outcomes if isinstance(o, ConcurrencyError)]
            assert len(wins) == 1 and len(losses) == 1, outcomes
            assert (losses[0].expected, losses[0].actual) == (current, current + 1)
            version = wins[0].stream_version
            assert version == current + 1 == ledger.log.stream_version("shared")
        assert [e.stream_version for e in ledger.events("shared")] == list(range(1, 17))
        assert ledger.verify().ok
        assert_projections_equal_rebuild(ledger)


@pytest.mark.slow
def test_racing_identical_retries_write_once(db_url: str) -> None:
    batch = [{**event, "id": f"00000000-0000-4000-8000-{n:012d}"}
             for n, event in enumerate(message_batch("retry", 1, 5))]
    with Ledger.open(db_url) as ledger:
        outcomes = race(ledger, lambda: ledger.append("retry", batch), contenders=3)
        assert all(isinstance(o, AppendResult) for o in outcomes), outcomes
        results = [o for o in outcomes if isinstance(o, AppendResult)]
        assert len({r.positions for r in results}) == 1
        assert sorted(r.duplicate for r in results) == [False, True, True]
        assert ledger.head() == 5 and ledger.log.stream_version("retry") == 5


def test_sqlite_reader_is_not_blocked_by_a_writer(sqlite_url: str) -> None:
    with Ledger.open(sqlite_url) as ledger:
        ledger.append("chat", message_batch("chat", 1, 3))

        # Fail at once instead of after the 30 s busy timeout (runs after the engine's own
        # connect hook, so it overrides the timeout that hook sets).
        def no_wait(dbapi_conn: Any, _record: Any) -> None:
            dbapi_conn.execute("PRAGMA busy_timeout=0")

        sa.event.listen(ledger.engine, "connect", no_wait)
        ledger.engine.dispose()
        path = sa.engine.make_url(sqlite_url).database
        assert path is not None
        writer = sqlite3.connect(path, isolation_level=None)
        try:
            writer.execute("BEGIN IMMEDIATE")  # another process is in an append
            assert [e.data["content"] for e in ledger.events("chat")] == [
                "chat #1", "chat #2", "chat #3"]
            assert ledger.verify().ok
        finally:
            writer.execute("ROLLBACK")
            writer.close()
