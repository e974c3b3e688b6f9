"""The database floor of ctxledger's write path: its own SQL, replayed with no Python of its own.

``record`` runs real ``Ledger.append`` calls on a SQLite file whose driver connection is a
``sqlite3.Connection`` subclass that writes down every statement, its parameters and
every ``BEGIN``/``COMMIT``, exactly as ctxledger sends them (its ``DriverStatement``
cursors, SQLAlchemy's own statements, the transaction control). ``replay`` then runs that
list, and nothing else, through a plain ``sqlite3`` connection with the engine's pragmas
on a copy of the database as it was before the first recorded append.

What the replay takes is what SQLite itself spends on the design: the b-trees each
event writes, the guards and reads, the commits and their WAL frames, plus the
``sqlite3`` module's per-call cost. No validation, hash chain, reducer, ``RowStore``
or SQLAlchemy runs in it, so no change to ctxledger's Python can make an append faster
than its replay. Compared with a peer's whole save in the same run, it says how much of
a target the schema alone leaves room for.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ctxledger import Ledger
from ctxledger.store.backends.sqlite import sqlite_pragmas

Statement = tuple[str, Any, bool]
"""(SQL, parameters, executemany?) as the driver received them."""


LOG: list[Statement] = []
"""Every recording connection's statements, in the order SQLite ran them (one list for
all of a pool's connections, so the order across them is kept)."""


class RecordingCursor(sqlite3.Cursor):
    """A cursor that writes down what it runs."""

    def execute(self, sql: str, parameters: Any = (), /) -> RecordingCursor:
        LOG.append((sql, parameters, False))
        super().execute(sql, parameters)
        return self

    def executemany(self, sql: str, seq_of_parameters: Iterable[Any], /) -> RecordingCursor:
        rows = list(seq_of_parameters)
        LOG.append((sql, rows, True))
        super().executemany(sql, rows)
        return self


class RecordingConnection(sqlite3.Connection):
    """``sqlite3.connect(..., factory=RecordingConnection)``: every statement is kept."""

    def cursor(self, factory: Any = None) -> Any:  # type: ignore[override]
        return super().cursor(factory or RecordingCursor)

    def execute(self, sql: str, parameters: Any = (), /) -> sqlite3.Cursor:
        return self.cursor().execute(sql, parameters)

    def executemany(self, sql: str, seq_of_parameters: Iterable[Any], /) -> sqlite3.Cursor:
        return self.cursor().executemany(sql, seq_of_parameters)

    def commit(self) -> None:
        # SQLAlchemy commits through the DBAPI method: with isolation_level None it is a
        # COMMIT statement when a transaction is open, and nothing otherwise.
        if self.in_transaction:
            LOG.append(("COMMIT", (), False))
        super().commit()

    def rollback(self) -> None:
        if self.in_transaction:
            LOG.append(("ROLLBACK", (), False))
        super().rollback()


@dataclass
class Recording:
    """The statements of some appends, and the database as it was before them."""

    before: Path
    """A copy of the database file taken right before the first recorded append."""
    statements: list[Statement] = field(default_factory=list)
    rows: dict[str, int] = field(default_factory=dict)
    """Rows per table after the recorded appends: a replay must end with the same."""


def record(directory: Path, appends: Callable[[Ledger], None]) -> Recording:
    """Run ``appends`` on a new ledger in ``directory`` and keep what it sent SQLite."""
    url = f"sqlite:///{directory / 'recorded.db'}"
    with Ledger.open(url, load_vocabulary=False):
        pass  # created and migrated
    before = directory / "before.db"
    _copy(directory / "recorded.db", before)
    connect_args = {"check_same_thread": False, "factory": RecordingConnection}
    with Ledger.open(url, load_vocabulary=False, connect_args=connect_args) as ledger:
        # Opening read and wrote its own statements: only the appends' are kept.
        LOG.clear()
        try:
            appends(ledger)
            statements = list(LOG)
        finally:
            LOG.clear()
    return Recording(before, statements, row_counts(directory / "recorded.db"))


def row_counts(path: Path) -> dict[str, int]:
    """Rows in every table of the database at ``path``."""
    conn = sqlite3.connect(path)
    try:
        tables = [name for (name,) in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
        return {name: int(conn.execute(f'SELECT count(*) FROM "{name}"').fetchone()[0])
                for name in tables}
    finally:
        conn.close()


def _copy(source: Path, target: Path) -> None:
    # The backup API copies what the database holds, WAL included, as one snapshot.
    with sqlite3.connect(source) as src, sqlite3.connect(target) as dst:
        src.backup(dst)
    src.close()
    dst.close()


def open_like_the_engine(path: Path) -> sqlite3.Connection:
    """A plain connection with the pragmas the SQLite backend sets on a file."""
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    for pragma in sqlite_pragmas(memory=False):
        conn.execute(pragma)
    return conn


def replay(recording: Recording, directory: Path) -> float:
    """Seconds to run the recorded statements on a fresh copy of the database."""
    path = directory / "replayed.db"
    _copy(recording.before, path)
    conn = open_like_the_engine(path)
    try:
        started = time.perf_counter()
        for sql, parameters, many in recording.statements:
            if many:
                conn.executemany(sql, parameters)
            else:
                conn.execute(sql, parameters).fetchall()
        seconds = time.perf_counter() - started
    finally:
        conn.close()
    if row_counts(path) != recording.rows:
        raise RuntimeError("the replay did not write what the recorded appends wrote")
    return seconds
