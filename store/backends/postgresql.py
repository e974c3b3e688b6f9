"""PostgreSQL: writers on different streams side by side (``pg_writes``), advisory locks
per schema (``locks``), readers stopping at the settled position."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from datetime import datetime
from typing import TYPE_CHECKING, Any, ClassVar

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.engine import URL, Engine

from ctxledger.store.backends import pg_scrub, pg_writes
from ctxledger.store.backends.base import Backend, Connections, Processor
from ctxledger.store.errors import LedgerError, SchemaMissing

if TYPE_CHECKING:
    from ctxledger.store.records import PreparedEvent

POSTGRES_EXTRA_HINT = "pip install 'ctxledger[postgres]'"

_LOCK = "SELECT pg_advisory_xact_lock(%(k)s::integer, hashtext(current_schema()))"
_TRY_LOCK = "SELECT pg_try_advisory_xact_lock(%(k)s::integer, hashtext(current_schema()))"


def require_postgres_driver() -> None:
    """Fail with one line naming the extra when psycopg is not installed."""
    if importlib.util.find_spec("psycopg") is None:
        raise LedgerError(f"PostgreSQL needs the postgres extra: {POSTGRES_EXTRA_HINT}")


def _cursor(conn: sa.Connection) -> Any:
    return conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]


class _AppendingConnections(Connections):
    """Pooled connections; a write transaction is marked as one that may append before it
    writes anything (``pg_writes.mark_appending``), so readers wait for it if it does."""

    @contextmanager
    def _marked(self) -> Iterator[sa.Connection]:
        with self.begin() as conn:
            pg_writes.mark_appending(conn)
            yield conn

    def transaction(self) -> AbstractContextManager[sa.Connection]:
        return self._marked()

    # append_transaction stays unmarked: an append marks itself in its locks' statement.


class PostgreSQLBackend(Backend):
    """PostgreSQL through psycopg 3."""

    name: ClassVar[str] = "postgresql"
    immutability_triggers: ClassVar[tuple[str, ...]] = (
        "events_no_update", "events_no_delete", "events_no_truncate",
        "seals_no_update", "seals_no_delete", "seals_no_truncate")
    concurrent_appends: ClassVar[bool] = True

    # -- engines ---------------------------------------------------------------------------

    def prepare_url(self, url: URL) -> URL:
        if url.drivername == "postgresql":
            url = url.set(drivername="postgresql+psycopg")
        require_postgres_driver()
        return url

    def create_engine(self, url: URL, **kwargs: Any) -> Engine:
        kwargs.setdefault("pool_pre_ping", True)
        return sa.create_engine(url, **kwargs)

    def database_exists(self, engine: Engine) -> bool:
        with engine.connect() as conn:
            return sa.inspect(conn).has_table("events")

    def check_schema(self, engine: Engine) -> None:
        # PostgreSQL skips the schemas of search_path that do not exist; with none left,
        # the first CREATE TABLE fails with a bare SQL error that does not name them.
        with engine.connect() as conn:
            current, path = conn.exec_driver_sql(
                "SELECT current_schema(), current_setting('search_path')").one()
        if current is not None:
            return
        names = [name.strip() for name in str(path).split(",") if name.strip()]
        named = [name for name in names if name != '"$user"'] or names
        if len(named) == 1:
            raise SchemaMissing(f"PostgreSQL schema {named[0]} (the URL's search_path) does"
                                f" not exist; create it first: CREATE SCHEMA {named[0]}")
        raise SchemaMissing(f"no schema of the URL's search_path ({path}) exists in"
                            " PostgreSQL; create one first with CREATE SCHEMA")

    def connections(self, engine: Engine) -> Connections:
        return _AppendingConnections(engine)

    # -- values and SQL --------------------------------------------------------------------

    def stored_utc(self, value: datetime) -> datetime:
        return value

    def bind_processor(self, type_: sa.types.TypeEngine[Any], proc: Processor) -> Processor:
        return proc

    def result_processor(self, type_: sa.types.TypeEngine[Any], proc: Processor) -> Processor:
        return proc

    def upsert(self, table: sa.Table) -> Any:
        return postgresql.insert(table)

    def json_text_sql(self, column: str, key: str) -> str:
        return f"CAST({column} AS json) ->> '{key}'"

    def enabled_triggers(self, conn: sa.Connection, tables: Sequence[str]) -> set[str]:
        # Each name resolved as the queries resolve it (search_path); names are the
        # caller's own identifiers.
        tables_sql = ", ".join(f"'{name}'::regclass" for name in tables)
        return set(conn.exec_driver_sql(
            f"SELECT tgname FROM pg_trigger WHERE tgrelid IN ({tables_sql})"
            " AND NOT tgisinternal AND tgenabled <> 'D'").scalars())

    # -- writing the log -------------------------------------------------------------------

    def lock_append(self, conn: sa.Connection, stream_id: str,
                    batch: Sequence[PreparedEvent], shared_keys: Sequence[str]) -> None:
        ids = [pg_writes.event_key(p.event.event_id) for p in batch
               if p.client_id and p.event.event_id is not None]
        pg_writes.lock_for_batch(conn, stream_id, [*ids, *shared_keys])

    def insert_events(self, conn: sa.Connection, rows: Sequence[dict[str, Any]],
                      guarded: bool) -> list[int] | None:
        return pg_writes.insert_rows(conn, rows, guarded)

    def lock_log(self, conn: sa.Connection) -> None:
        _cursor(conn).execute("LOCK TABLE events IN EXCLUSIVE MODE")

    def lock(self, conn: sa.Connection, key: int) -> None:
        conn.exec_driver_sql(_LOCK, {"k": key})

    def try_lock(self, conn: sa.Connection, key: int) -> bool:
        return bool(conn.exec_driver_sql(_TRY_LOCK, {"k": key}).scalar_one())

    def settled_position(self, conn: sa.Connection) -> int:
        return pg_writes.settled_position(conn)

    def tail_limit(self, conn: sa.Connection, until_position: int | None) -> int | None:
        settled = pg_writes.settled_position(conn)
        return settled if until_position is None else min(until_position, settled)

    def replay_lag(self, conn: sa.Connection) -> float | None:
        # The usual measure: nothing received is left to replay, or else the time since
        # the last transaction replayed committed on the primary (both clocks: one host,
        # or NTP on every host).
        lag = conn.exec_driver_sql(
            "SELECT CASE WHEN NOT pg_is_in_recovery() THEN NULL"
            " WHEN pg_last_wal_receive_lsn() IS NOT DISTINCT FROM pg_last_wal_replay_lsn()"
            " THEN 0.0 ELSE greatest(0.0, extract(epoch FROM"
            " clock_timestamp() - pg_last_xact_replay_timestamp()))::float8 END").scalar_one()
        return None if lag is None else float(lag)

    # -- rebuilding and reading ------------------------------------------------------------

    def bulk_writes(self, conn: sa.Connection) -> AbstractContextManager[None]:
        return nullcontext()

    def begin_read_snapshot(self, conn: sa.Connection) -> None:
        # READ COMMITTED would let an append land between two of the reader's queries.
        conn.exec_driver_sql("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")

    def snapshot_is_prefix(self, conn: sa.Connection) -> bool:
        return pg_writes.snapshot_is_prefix(conn)

    @contextmanager
    def appends_drained(self, engine: Engine) -> Iterator[Callable[[], None]]:
        # On a connection of its own, in a transaction of its own: the lock goes with
        # that transaction whatever happens, and never stays on a pooled connection.
        with engine.connect() as barrier, barrier.begin() as held:
            pg_writes.hold_appends(barrier)

            def release() -> None:
                if held.is_active:
                    held.rollback()
            yield release

    # -- erasure -----------------------------------------------------------------------

    @contextmanager
    def erasing(self, conn: sa.Connection) -> Iterator[None]:
        # The guard's function (revision 0018) lets a member of the owner's role turn a
        # live row into a tombstone in a transaction that set ``ctxledger.erasing``;
        # a setting local to this transaction, so no lock is taken and no other
        # transaction ever sees the guard lifted.
        owner = conn.exec_driver_sql(
            "SELECT pg_has_role(current_user, relowner, 'USAGE') FROM pg_class"
            " WHERE oid = 'events'::regclass").scalar()
        if not owner:
            raise LedgerError("erase must run as the owner of table events (the role that"
                              " runs the migrations); nothing was erased")
        conn.exec_driver_sql("SELECT set_config('ctxledger.erasing', 'on', true)")
        yield
        conn.exec_driver_sql("SELECT set_config('ctxledger.erasing', 'off', true)")

    def check_scrub(self, conn: sa.Connection) -> None:
        pg_scrub.online_scrub_available(conn.connection.dbapi_connection)

    def scrub(self, engine: Engine, tables: Sequence[str]) -> None:
        # Online with pg_repack where it is installed, else VACUUM FULL (``pg_scrub``).
        raw = engine.raw_connection()
        try:
            driver = raw.driver_connection
            assert driver is not None
            driver.autocommit = True  # VACUUM refuses to run in a transaction block
            try:
                pg_scrub.scrub(driver, engine.dialect.identifier_preparer.quote, tables)
            finally:
                driver.autocommit = False
        finally:
            raw.close()


BACKEND = PostgreSQLBackend()
