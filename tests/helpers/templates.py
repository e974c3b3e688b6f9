"""Template databases: migrated once per test session (per xdist worker), copied per test.

Migrating a database through every Alembic revision costs about 0.2 s on SQLite and 0.4 s
on PostgreSQL; a copy of a migrated template costs a few milliseconds. A template is what
``Ledger.open`` creates in an empty database (the migrations, then every built-in
projection's checkpoint), so a copy is a fresh, fully migrated, empty database.

- SQLite: the template file is copied to the test's path.
- PostgreSQL: every statement ``Ledger.open`` runs to create a schema is recorded once (in
  a throwaway schema) and replayed, in one transaction on one connection, in a new schema
  (reached through ``search_path``, exactly like the ``pg_url`` fixture's). This skips
  Alembic's and SQLAlchemy's work and the round trips between connections. After the
  test the schema is emptied, refilled from a pristine one and renamed, and the next test
  takes it: about 0.04 s, where replaying (0.2-0.3 s) and dropping every test's tables
  also left dead rows in the server's catalogs (hundreds of MB over a run) that slowed
  every later lookup. A schema whose shape a test changed is dropped instead. Cloning a
  database (``CREATE DATABASE ... TEMPLATE``) took 0.45 s and dropping it 1.1 s, so it
  lost. ``tests/test_templates.py`` checks that a copy, and a schema used and put back,
  equal a database migrated from scratch.
"""

from __future__ import annotations

import atexit
import shutil
import sqlite3
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from ctxledger import Ledger

Statement = tuple[str, Any, bool]
"""A statement as the driver ran it: its SQL, its parameters, and whether it was many."""


def _with_search_path(url: sa.URL, schema: str) -> str:
    return url.update_query_dict({"options": f"-csearch_path={schema}"}).render_as_string(
        hide_password=False)


_SHAPE = """
SELECT md5(string_agg(replace(item, %(s)s::text, ''), ',' ORDER BY item)) FROM (
  SELECT c.relname || ':' || c.relkind::text || ':' || a.attname || ':' || a.atttypid::text
         || ':' || a.attnotnull::text || ':' || coalesce(pg_get_expr(d.adbin, d.adrelid), '')
         AS item
    FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0
         AND NOT a.attisdropped
    LEFT JOIN pg_attrdef d ON d.adrelid = c.oid AND d.adnum = a.attnum
   WHERE c.relnamespace = %(s)s::text::regnamespace
  UNION ALL
  SELECT 'c:' || conname || ':' || pg_get_constraintdef(oid) FROM pg_constraint
   WHERE connamespace = %(s)s::text::regnamespace
  UNION ALL
  SELECT 't:' || t.tgname || ':' || t.tgenabled::text || ':' || pg_get_triggerdef(t.oid)
    FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
   WHERE c.relnamespace = %(s)s::text::regnamespace AND NOT t.tgisinternal
  UNION ALL
  SELECT 'f:' || proname || ':' || md5(prosrc) FROM pg_proc
   WHERE pronamespace = %(s)s::text::regnamespace
  UNION ALL
  SELECT 'p:' || relname || ':' || coalesce(array_to_string(reloptions, ','), '')
         || ':' || relrowsecurity::text FROM pg_class
   WHERE relnamespace = %(s)s::text::regnamespace
) AS items
"""
"""A digest of a schema's tables, columns, defaults, indexes, constraints, triggers (and
whether each is enabled) and functions, free of the schema's name."""


def _shape(cursor: Any, schema: str) -> str:
    # Definitions name a schema on the search path unqualified: keep it off the path.
    cursor.execute("SET LOCAL search_path TO pg_catalog")
    cursor.execute(_SHAPE, {"s": schema})
    return str(cursor.fetchone()[0])


class Templates:
    """The session's templates, each built on first use."""

    def __init__(self, directory: Path, pg_url: str) -> None:
        self.directory = directory
        self.server = sa.engine.make_url(pg_url).difference_update_query(["options"])
        self._sqlite: Path | None = None
        self._pg_script: list[Statement] | None = None
        self._pg_pool: list[str] = []
        self._pg_source: str | None = None
        self._pg_shape: str | None = None
        self._pg_tables: list[str] = []
        self._pg_filled: list[str] = []
        self._pg_sequences: dict[str, tuple[Any, ...]] = {}
        self._admin: sa.Engine | None = None

    # -- SQLite ------------------------------------------------------------------------------

    def sqlite(self, target: Path) -> str:
        """Copy the migrated SQLite template to ``target``; returns its URL."""
        if self._sqlite is None:
            path = self.directory / "template.db"
            with Ledger.open(f"sqlite:///{path}", load_vocabulary=False):
                pass
            # Everything into the file itself, so that copying the file copies it all.
            with closing(sqlite3.connect(path)) as conn:
                conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            wal = path.with_name(path.name + "-wal")
            assert not wal.exists() or wal.stat().st_size == 0
            self._sqlite = path
        target.parent.mkdir(parents=True, exist_ok=True)
        # With the template's mode (owner-only), as a database ctxledger creates has.
        shutil.copy(self._sqlite, target)
        return f"sqlite:///{target}"

    # -- PostgreSQL --------------------------------------------------------------------------

    def admin(self) -> sa.Engine:
        """An engine on the server's test database, without a ``search_path``."""
        if self._admin is None:
            self._admin = sa.create_engine(self.server)
        return self._admin

    def _pg_statements(self) -> list[Statement]:
        if self._pg_script is None:
            schema = f"ctxl_tpl_{uuid.uuid4().hex[:12]}"
            found: list[Statement] = []

            def record(conn: sa.Connection, cursor: Any, statement: str, parameters: Any,
                       context: Any, executemany: bool) -> None:
                found.append((statement, parameters, executemany))

            with self.admin().begin() as conn:
                conn.exec_driver_sql(f'CREATE SCHEMA "{schema}"')
            try:
                sa.event.listen(sa.Engine, "after_cursor_execute", record)
                try:
                    with Ledger.open(_with_search_path(self.server, schema),
                                     load_vocabulary=False):
                        pass
                finally:
                    sa.event.remove(sa.Engine, "after_cursor_execute", record)
            finally:
                with self.admin().begin() as conn:
                    conn.exec_driver_sql(f'DROP SCHEMA "{schema}" CASCADE')
            self._pg_script = found
        return self._pg_script

    def _replayed(self, cursor: Any, schema: str) -> None:
        """Create ``schema`` and replay the template's statements in it (not committed)."""
        cursor.execute(f'CREATE SCHEMA "{schema}"')
        cursor.execute(f'SET LOCAL search_path TO "{schema}"')
        for statement, parameters, many in self._pg_statements():
            if many:
                cursor.executemany(statement, parameters)
            else:
                cursor.execute(statement, parameters)

    def _source(self, cursor: Any) -> str:
        """The worker's pristine schema (made once, never handed out): what a used
        schema is refilled from."""
        if self._pg_source is None:
            schema = f"t_src_{uuid.uuid4().hex[:12]}"
            self._replayed(cursor, schema)
            self._pg_shape = _shape(cursor, schema)
            cursor.execute("SELECT c.relname, c.relkind FROM pg_class c WHERE"
                           " c.relnamespace = %s::regnamespace AND c.relkind IN ('r', 'S')"
                           " ORDER BY 1", (schema,))
            found = cursor.fetchall()
            self._pg_tables = [name for name, kind in found if kind == "r"]
            self._pg_filled = []
            for table in self._pg_tables:
                cursor.execute(f'SELECT EXISTS (SELECT FROM "{schema}"."{table}")')
                if cursor.fetchone()[0]:
                    self._pg_filled.append(table)
            self._pg_sequences = {}
            for name in (name for name, kind in found if kind == "S"):
                cursor.execute(f'SELECT last_value, is_called FROM "{schema}"."{name}"')
                self._pg_sequences[name] = tuple(cursor.fetchone())
            self._pg_source = schema
        return self._pg_source

    def _reset(self, cursor: Any, schema: str, new_name: str) -> bool:
        """Put a used schema back as the template made it, under ``new_name`` (a fresh
        URL, so no cache keyed by one sees another test's database); False when the test
        changed its shape or a lock cannot be had (then it is dropped instead). Triggers are
        off for the transaction (``session_replication_role``): the log's guards refuse
        deletes."""
        if self._pg_source is None:
            return False
        source = self._pg_source
        # Whatever the test left running finishes first, and then cannot write here.
        cursor.execute("SET LOCAL lock_timeout = '5s'")
        cursor.execute("LOCK TABLE " + ", ".join(f'"{schema}"."{t}"' for t in self._pg_tables)
                       + " IN ACCESS EXCLUSIVE MODE")
        if _shape(cursor, schema) != self._pg_shape:
            return False
        cursor.execute("SET LOCAL session_replication_role = replica")
        cursor.execute("".join(
            [f'DELETE FROM "{schema}"."{table}";' for table in self._pg_tables]
            + [f'INSERT INTO "{schema}"."{table}" OVERRIDING SYSTEM VALUE'
               f' SELECT * FROM "{source}"."{table}";' for table in self._pg_filled]))
        for name, (value, called) in self._pg_sequences.items():
            cursor.execute("SELECT setval(%s, %s, %s)", (f'"{schema}"."{name}"', value,
                                                         called))
        cursor.execute(f'ALTER SCHEMA "{schema}" RENAME TO "{new_name}"')
        return True

    @contextmanager
    def postgres(self) -> Iterator[str]:
        """A schema as the template made it; yields its URL, then puts it back for the
        next test (emptied and refilled, under a new name), or drops it if its shape
        changed. Reusing schemas keeps the server's catalogs from growing by every
        test's tables (dropped tables leave dead catalog rows that slow every lookup)."""
        raw = self.admin().raw_connection()
        try:
            cursor = raw.cursor()
            if self._pg_pool:
                schema = self._pg_pool.pop()
            else:
                self._source(cursor)
                schema = f"t_{uuid.uuid4().hex[:12]}"
                self._replayed(cursor, schema)
                raw.commit()
        finally:
            raw.close()
        try:
            yield _with_search_path(self.server, schema)
        finally:
            self._put_back(schema)

    def _put_back(self, schema: str) -> None:
        new_name = f"t_{uuid.uuid4().hex[:12]}"
        raw = self.admin().raw_connection()
        try:
            cursor = raw.cursor()
            try:
                kept = self._reset(cursor, schema, new_name)
            except Exception:  # a lock still held, a row the table no longer takes
                kept = False
            if kept:
                raw.commit()
                self._pg_pool.append(new_name)
            else:
                raw.rollback()
                cursor.execute(f'DROP SCHEMA "{schema}" CASCADE')
                raw.commit()
        finally:
            raw.close()

    @contextmanager
    def database(self, backend: str, directory: Path) -> Iterator[str]:
        """A fresh, migrated database of ``backend`` (``"sqlite"`` or ``"postgres"``); a
        SQLite file goes in ``directory``."""
        if backend == "sqlite":
            yield self.sqlite(directory / "ledger.db")
            return
        with self.postgres() as url:
            yield url

    def close(self) -> None:
        """Drop the schemas kept for reuse and let go of the server."""
        if self._admin is not None:
            with self.admin().begin() as conn:
                for schema in [*self._pg_pool, *filter(None, [self._pg_source])]:
                    conn.exec_driver_sql(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
            self._pg_pool.clear()
            self._pg_source = None
            self._admin.dispose()
            self._admin = None


_shared: Templates | None = None


def shared(pg_url: str) -> Templates:
    """The process's templates (one per xdist worker), for the ``templates`` fixture and
    for helpers used outside fixtures (``helpers.databases.module_database``); removed
    when the process exits."""
    global _shared
    if _shared is None:
        directory = Path(tempfile.mkdtemp(prefix="ctxledger-templates-"))
        _shared = Templates(directory, pg_url)

        def remove(found: Templates = _shared) -> None:
            found.close()
            shutil.rmtree(directory, ignore_errors=True)

        atexit.register(remove)
    return _shared
