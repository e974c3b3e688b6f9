"""``Backend``: everything the ledger does differently on each database, behind one interface.

Code outside ``store/backends/`` never asks which database it runs on; it asks
``backend_for(conn)`` and calls these methods. ``tests/backends/test_contract.py`` holds
every backend to the promises written here.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import sqlalchemy as sa
from sqlalchemy.engine import URL, Engine
from sqlalchemy.pool import StaticPool

if TYPE_CHECKING:
    from ctxledger.store.records import PreparedEvent

READ_ONLY_OPTION = "ctxledger_read_only"
"""Execution option marking a connection that only reads (deferred BEGIN on SQLite)."""

Processor = Callable[[Any], Any]
"""A bind or result processor: one value in, one value out."""


class Connections:
    """Where an ``EventLog`` gets its connections: here, from the engine's pool, behind a
    process lock when the pool is one shared connection (in-memory SQLite), which must
    not interleave transactions.

    A backend whose connections need more (a connection kept between transactions, a
    mark on write transactions) gives a subclass from ``Backend.connections``.
    """

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._lock = threading.RLock() if isinstance(engine.pool, StaticPool) else None

    @contextmanager
    def begin(self) -> Iterator[sa.Connection]:
        """A write transaction, committed when the block ends (rolled back on error)."""
        if self._lock is None:
            with self.engine.begin() as conn:
                yield conn
            return
        with self._lock, self.engine.begin() as conn:
            yield conn

    def transaction(self) -> AbstractContextManager[sa.Connection]:
        """A write transaction that may append after other writes (``EventLog.transaction``)."""
        return self.begin()

    def append_transaction(self) -> AbstractContextManager[sa.Connection]:
        """The write transaction of one ``EventLog.append`` (its hot path)."""
        return self.begin()

    @contextmanager
    def connection(self) -> Iterator[sa.Connection]:
        """A connection that only reads (marked with ``READ_ONLY_OPTION``)."""
        if self._lock is None:
            with self.engine.connect() as conn:
                yield conn.execution_options(**{READ_ONLY_OPTION: True})
            return
        with self._lock, self.engine.connect() as conn:
            yield conn.execution_options(**{READ_ONLY_OPTION: True})


class Backend(ABC):
    """One database's strategy. Instances hold no state of their own: one per kind,
    chosen once per engine by ``store.backends.backend_for``."""

    name: ClassVar[str]
    """SQLAlchemy's name of the database (``URL.get_backend_name()``, ``Dialect.name``)."""

    immutability_triggers: ClassVar[tuple[str, ...]]
    """The triggers (created by the migrations) that make ``events`` and ``seals``
    reject changes; ``verify`` reports any that are missing or disabled."""

    concurrent_appends: ClassVar[bool]
    """True when appends to different streams run side by side: rows that several
    streams' inline projections update must then be locked (``EventLog(shared_keys=)``).
    False when every write transaction holds the whole database."""

    # -- engines ---------------------------------------------------------------------------

    @abstractmethod
    def prepare_url(self, url: URL) -> URL:
        """The URL to connect with (a default driver filled in); raises ``LedgerError`` in
        one line for a URL the ledger cannot work with."""

    @abstractmethod
    def create_engine(self, url: URL, **kwargs: Any) -> Engine:
        """An engine for ``url`` (from ``prepare_url``) with every connection set up as the
        event log relies on; ``kwargs`` go to SQLAlchemy, whose settings win."""

    @abstractmethod
    def database_exists(self, engine: Engine) -> bool:
        """True when ``engine``'s database holds a ctxledger log (its ``events`` table),
        without creating anything."""

    def database_file(self, engine: Engine) -> Path | None:
        """The file holding the database, where this process can know it (None for a
        server's database or one in memory): a hook's worker leaves when it is replaced."""
        return None

    def database_dir(self, engine: Engine) -> Path | None:
        """The folder holding the database's files, where this process can know it (None
        for a server's database or one in memory): a witness must live outside it."""
        found = self.database_file(engine)
        return None if found is None else found.parent

    @abstractmethod
    def check_schema(self, engine: Engine) -> None:
        """Raise ``SchemaMissing`` in one line when the database offers no place to create
        the tables in."""

    @abstractmethod
    def connections(self, engine: Engine) -> Connections:
        """How an ``EventLog`` on ``engine`` gets its read and write connections."""

    # -- values and SQL --------------------------------------------------------------------

    @abstractmethod
    def stored_utc(self, value: datetime) -> datetime:
        """An aware UTC datetime as it is bound for a ``UTCDateTime`` column."""

    @abstractmethod
    def bind_processor(self, type_: sa.types.TypeEngine[Any], proc: Processor) -> Processor:
        """The bind processor a ``DriverStatement`` runs for ``type_``, given SQLAlchemy's
        ``proc``: the same values out, possibly faster."""

    @abstractmethod
    def result_processor(self, type_: sa.types.TypeEngine[Any], proc: Processor) -> Processor:
        """The result processor a ``DriverStatement`` runs for ``type_``, given
        SQLAlchemy's ``proc``: the same values out, possibly faster."""

    @abstractmethod
    def upsert(self, table: sa.Table) -> Any:
        """An ``INSERT`` into ``table`` that has ``on_conflict_do_update`` and
        ``on_conflict_do_nothing`` (and ``excluded``)."""

    @abstractmethod
    def json_text_sql(self, column: str, key: str) -> str:
        """SQL for the string value of top-level ``key`` of the JSON text in ``column``
        (NULL when absent). ``key`` is a plain identifier, written into the SQL as it is."""

    @abstractmethod
    def enabled_triggers(self, conn: sa.Connection, tables: Sequence[str]) -> set[str]:
        """Names of the enabled triggers on ``tables``."""

    # -- writing the log -------------------------------------------------------------------

    @abstractmethod
    def lock_append(self, conn: sa.Connection, stream_id: str,
                    batch: Sequence[PreparedEvent], shared_keys: Sequence[str]) -> None:
        """Take what an append of ``batch`` to ``stream_id`` must hold until commit, so its
        version check, stream rules and idempotency are decided with nothing changing:
        the stream, the batch's client-supplied event ids and ``shared_keys``."""

    @abstractmethod
    def insert_events(self, conn: sa.Connection, rows: Sequence[dict[str, Any]],
                      guarded: bool) -> list[int] | None:
        """Insert one batch's rows (one stream, one ``recorded_at``, chained) at
        consecutive positions and return them. With ``guarded``, insert nothing and return
        None unless the row before the first (``stream_version - 1``, ``prev_hash``) is
        the stream's head. The caller holds ``lock_append``."""

    @abstractmethod
    def lock_log(self, conn: sa.Connection) -> None:
        """Wait for every append in flight and hold off new ones until the transaction
        ends: rebuild, catch-up and seal need the log to stand still. Do not append after."""

    @abstractmethod
    def lock(self, conn: sa.Connection, key: int) -> None:
        """Serialize the transactions that take ``key`` (``store.backends.locks``): wait
        for the one holding it; held until this transaction ends."""

    @abstractmethod
    def try_lock(self, conn: sa.Connection, key: int) -> bool:
        """``lock`` without waiting: False when another transaction holds ``key``."""

    @abstractmethod
    def settled_position(self, conn: sa.Connection) -> int:
        """The highest position below which no transaction can still commit an event: a
        reader that stops there never skips one that commits later."""

    @abstractmethod
    def tail_limit(self, conn: sa.Connection, until_position: int | None) -> int | None:
        """The position a reader of events after a position stops at: ``until_position``
        (None: the head), lowered to ``settled_position`` where appends commit out of
        position order."""

    def replay_lag(self, conn: sa.Connection) -> float | None:
        """Seconds a read replica's copy of the log is behind its primary (0.0 when it has
        replayed everything it received), or None when the database is no replica."""
        return None

    # -- rebuilding and reading ------------------------------------------------------------

    @abstractmethod
    def bulk_writes(self, conn: sa.Connection) -> AbstractContextManager[None]:
        """Settings for a transaction that writes whole tables (a rebuild), restored after."""

    # -- erasure -----------------------------------------------------------------------

    @abstractmethod
    def erasing(self, conn: sa.Connection) -> AbstractContextManager[None]:
        """Around the writes of an erase, in the caller's transaction: let the update guard
        on ``events`` pass tombstones (``store.erase``) for this transaction alone, and
        have what the erase overwrites or deletes zeroed where the database can; the
        guard is back before the transaction ends. Takes no lock other transactions
        wait for."""

    @abstractmethod
    def check_scrub(self, conn: sa.Connection) -> None:
        """Before an erase writes anything: raise ``LedgerError`` (one line) when a
        setting would keep ``scrub`` from running."""

    @abstractmethod
    def scrub(self, engine: Engine, tables: Sequence[str]) -> None:
        """Outside any transaction, after an erase: make rows it deleted or overwrote in
        ``tables`` unrecoverable from the database's files (free pages, dead tuples, the
        WAL)."""

    @abstractmethod
    def begin_read_snapshot(self, conn: sa.Connection) -> None:
        """Called first thing in a transaction just begun that only reads: every query in
        it then reads one snapshot of the database (where the database can, it refuses
        writes too)."""

    @abstractmethod
    def snapshot_is_prefix(self, conn: sa.Connection) -> bool:
        """In a read snapshot just begun (``begin_read_snapshot``): whether it holds every
        event below its head, so that what is derived from it equals a replay up to its
        head. False when an append with an earlier position may still have been in
        flight when the snapshot was taken."""

    @abstractmethod
    def appends_drained(self, engine: Engine) -> AbstractContextManager[Callable[[], None]]:
        """Hold new appends back and wait until those in progress have ended; yields a
        function that lets appends go on (called once a snapshot taken inside is pinned;
        leaving the block does it too). A snapshot taken inside is a prefix."""
