"""Opening a database that does not exist yet from several threads or processes at once.

Every opener creates, migrates or joins the same new database: on SQLite one new file
(switching it to WAL needs a lock another opener may hold), on PostgreSQL one fresh
schema (the first migration runs once, the others wait for it). Each of the trials
starts its openers together at a barrier; every open must succeed.
"""

from __future__ import annotations

import multiprocessing
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from multiprocessing.synchronize import Barrier as ProcessBarrier
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from conftest import PG_URL, pg_schema_url, require_postgres

from ctxledger import Ledger
from ctxledger._migrate import current_revision, head_revision

TRIALS = 30
THREADS = 4
PROCESSES = 3
GUARD_SECONDS = 300
"""Only a guard against a hung opener; never an assertion about speed."""


def open_once(url: str) -> str | None:
    """Open ``url`` and write to it; None on success, else the error in one line."""
    try:
        with Ledger.open(url, load_vocabulary=False) as ledger:
            ledger.append(f"s-{uuid.uuid4().hex[:8]}",
                          {"type": "message.appended", "data": {"role": "user",
                                                                "content": "hi"}})
    except Exception as exc:  # reported, with the trial, by the test
        return f"{type(exc).__name__}: {exc}".splitlines()[0]
    return None


def _process_opener(urls: list[str], barrier: ProcessBarrier, out: Any) -> None:
    """One process's part: at each trial's barrier, open that trial's database."""
    for trial, url in enumerate(urls):
        try:
            barrier.wait(GUARD_SECONDS)
        except threading.BrokenBarrierError:
            out.put((trial, "the barrier broke"))
            return
        out.put((trial, open_once(url)))


def open_in_threads(urls: list[str]) -> list[tuple[int, str]]:
    """Each trial: ``THREADS`` threads open that trial's database at once."""
    failures: list[tuple[int, str]] = []
    for trial, url in enumerate(urls):
        barrier = threading.Barrier(THREADS)
        found: list[str | None] = []

        def run(barrier: threading.Barrier = barrier, url: str = url,
                found: list[str | None] = found) -> None:
            barrier.wait(GUARD_SECONDS)
            found.append(open_once(url))

        threads = [threading.Thread(target=run) for _ in range(THREADS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(GUARD_SECONDS)
        assert len(found) == THREADS, f"trial {trial}: an opener hung"
        failures += [(trial, error) for error in found if error is not None]
    return failures


def open_in_processes(urls: list[str]) -> list[tuple[int, str]]:
    """``PROCESSES`` processes, started once; at each trial they open its database at once."""
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(PROCESSES)
    out = context.Queue()
    procs = [context.Process(target=_process_opener, args=(urls, barrier, out))
             for _ in range(PROCESSES)]
    for proc in procs:
        proc.start()
    try:
        results = [out.get(timeout=GUARD_SECONDS) for _ in range(PROCESSES * len(urls))]
        for proc in procs:
            proc.join(GUARD_SECONDS)
            assert proc.exitcode == 0, f"an opener process exited with {proc.exitcode}"
    finally:
        for proc in procs:
            if proc.is_alive():
                proc.kill()
                proc.join()
    assert len(results) == PROCESSES * len(urls)
    return [(trial, error) for trial, error in results if error is not None]


def check_databases(urls: list[str], openers: int) -> None:
    """Each database is at the newest revision and holds one event per opener."""
    for url in urls:
        with Ledger.open(url, load_vocabulary=False, create=False) as ledger:
            assert current_revision(ledger.engine) == head_revision()
            assert len(ledger.events()) == openers
            assert ledger.verify().ok


@pytest.fixture
def pg_schemas() -> Iterator[Callable[[int], list[str]]]:
    """Makes fresh empty schemas (the ``db_url`` fixture's URL shape); drops them after."""
    require_postgres()
    admin = sa.create_engine(PG_URL, isolation_level="AUTOCOMMIT")
    made: list[str] = []

    def make(count: int) -> list[str]:
        names = [f"t_{uuid.uuid4().hex[:12]}" for _ in range(count)]
        with admin.connect() as conn:
            for name in names:
                conn.exec_driver_sql(f'CREATE SCHEMA "{name}"')
                made.append(name)
        return [pg_schema_url(name) for name in names]

    try:
        yield make
    finally:
        with admin.connect() as conn:
            for name in made:
                conn.exec_driver_sql(f'DROP SCHEMA "{name}" CASCADE')
        admin.dispose()


def sqlite_urls(folder: Path) -> list[str]:
    """A new file's URL per trial."""
    return [f"sqlite:///{folder / f'trial-{n}.db'}" for n in range(TRIALS)]


def test_opening_a_new_sqlite_file_waits_for_a_writer_holding_it(tmp_path: Path) -> None:
    """The race's moment, made certain: another connection holds the write lock of a new
    file still in rollback-journal mode (as a first opener migrating it does), where
    SQLite refuses the switch to WAL at once instead of calling the busy handler."""
    path = tmp_path / "held.db"
    path.touch(mode=0o600)  # owner-only, as the ledger makes its files
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")
    release = threading.Timer(0.3, holder.execute, args=("COMMIT",))
    release.start()
    started = time.perf_counter()
    try:
        assert open_once(f"sqlite:///{path}") is None
    finally:
        release.join()
        holder.close()
    assert time.perf_counter() - started >= 0.3  # it waited for the lock
    check_databases([f"sqlite:///{path}"], 1)


@pytest.mark.slow
def test_a_new_sqlite_file_opened_by_threads_at_once(tmp_path: Path) -> None:
    urls = sqlite_urls(tmp_path)
    assert open_in_threads(urls) == []
    check_databases(urls, THREADS)


@pytest.mark.slow
def test_a_new_sqlite_file_opened_by_processes_at_once(tmp_path: Path) -> None:
    urls = sqlite_urls(tmp_path)
    assert open_in_processes(urls) == []
    check_databases(urls, PROCESSES)


@pytest.mark.slow
@pytest.mark.postgres
def test_a_fresh_postgres_schema_opened_by_threads_at_once(
        pg_schemas: Callable[[int], list[str]]) -> None:
    urls = pg_schemas(TRIALS)
    assert open_in_threads(urls) == []
    check_databases(urls, THREADS)


@pytest.mark.slow
@pytest.mark.postgres
def test_a_fresh_postgres_schema_opened_by_processes_at_once(
        pg_schemas: Callable[[int], list[str]]) -> None:
    urls = pg_schemas(TRIALS)
    assert open_in_processes(urls) == []
    check_databases(urls, PROCESSES)
