"""Template databases: migrated once per test session (per xdist worker), copied per test.

Migrating a database through every Alembic revision costs about 0.2 s on SQLite and 0.4 s
on PostgreSQL; a copy of a migrated template costs a few milliseconds. A template is what
``Ledger.open`` creates in an empty database (the migrations, then every built-in
projection's checkpoint), so a copy is a fresh, fully migrated, empty database.

- SQLite: the template file is copied to the test's path.
- PostgreSQL: every statement ``Ledger.open`` runs to create a schema is recorded once (in
  a throwaway schema) and replayed, in one transaction on one connection, in each test's
  new schema (reached through ``search_path``, exactly like the ``pg_url`` fixture's). This
  skips Alembic's and SQLAlchemy's work and the round trips between connections. Measured
  on a loaded machine: 0.2 s to replay and 0.02 s to drop, against 1 s to migrate; cloning
  a database (``CREATE DATABASE ... TEMPLATE``) took 0.45 s and dropping it 1.1 s (files to
  write, unlink and sync), so it lost. ``tests/test_templates.py`` checks that a copy equals
  a database migrated from scratch.
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


class Templates:
    """The session's templates, each built on first use."""

    def __init__(self, directory: Path, pg_url: str) -> None:
        self.directory = directory
        self.server = sa.engine.make_url(pg_url).difference_update_query(["options"])
        self._sqlite: Path | None = None
        self._pg_script: list[Statement] | None = None
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

    @contextmanager
    def postgres(self) -> Iterator[str]:
        """A new schema with the template's statements replayed in it; yields its URL, then
        drops it."""
        statements = self._pg_statements()
        schema = f"t_{uuid.uuid4().hex[:12]}"
        raw = self.admin().raw_connection()
        try:
            cursor = raw.cursor()
            cursor.execute(f'CREATE SCHEMA "{schema}"')
            cursor.execute(f'SET LOCAL search_path TO "{schema}"')
            for statement, parameters, many in statements:
                if many:
                    cursor.executemany(statement, parameters)
                else:
                    cursor.execute(statement, parameters)
            raw.commit()
        finally:
            raw.close()
        try:
            yield _with_search_path(self.server, schema)
        finally:
            with self.admin().begin() as conn:
                conn.exec_driver_sql(f'DROP SCHEMA "{schema}" CASCADE')

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
        """Let go of the server."""
        if self._admin is not None:
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
