"""Shared fixtures: every store/projection test runs on real SQLite and real PostgreSQL.

``db_url`` and ``ledger`` give each test a fresh, fully migrated, empty database: a copy of
a template migrated once per session (``helpers.templates``; on PostgreSQL a schema of its
own, via ``search_path``). ``empty_db_url`` gives one nothing has been created in yet (for
tests of creating and migrating), as do ``sqlite_url`` and ``pg_url`` (an empty schema)
for one backend. The server is the one ``CTXLEDGER_TEST_PG_URL`` names
(default ``postgresql+psycopg://postgres@127.0.0.1:5432/test``). Without a server
PostgreSQL tests skip with the reason shown, unless ``CTXLEDGER_REQUIRE_PG=1`` (set by
``.ci/run``), where they fail instead.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import sqlalchemy as sa
from helpers.templates import Templates
from helpers.templates import shared as shared_templates

from ctxledger import Ledger

PG_URL = os.environ.get("CTXLEDGER_TEST_PG_URL",
                        "postgresql+psycopg://postgres@127.0.0.1:5432/test")
REQUIRE_PG = os.environ.get("CTXLEDGER_REQUIRE_PG") == "1"
# No hook run by a test leaves a warm worker behind (ctxledger._hook._worker); the tests of
# the worker turn it on for their own processes.
os.environ["CTXLEDGER_HOOK_WORKER_IDLE"] = "0"

_pg_error: str | None = None
_pg_checked = False


def _pg_unavailable() -> str | None:
    global _pg_checked, _pg_error
    if not _pg_checked:
        _pg_checked = True
        try:
            engine = sa.create_engine(PG_URL, connect_args={"connect_timeout": 3})
            with engine.connect() as conn:
                conn.exec_driver_sql("SELECT 1")
            _create_repack_extension(engine)
            engine.dispose()
        except Exception as exc:  # any failure means "no usable server"
            _pg_error = f"PostgreSQL not reachable at {PG_URL}: {type(exc).__name__}"
    return _pg_error


def _create_repack_extension(engine: sa.Engine) -> None:
    """An erase scrubs online where pg_repack is installed in the database (``make
    pg-repack`` installs the package): created here when the server has it, so that the
    erase tests take that path; those of ``VACUUM FULL`` turn it off by the environment."""
    with engine.connect() as conn:
        if conn.exec_driver_sql("SELECT 1 FROM pg_available_extensions"
                                " WHERE name = 'pg_repack'").first() is None:
            return
        try:
            conn.exec_driver_sql("CREATE EXTENSION IF NOT EXISTS pg_repack")
            conn.commit()
        except sa.exc.DBAPIError:  # another worker created it at the same moment
            conn.rollback()


def require_postgres() -> None:
    """Skip (locally) or fail (CI) when PostgreSQL is not reachable."""
    problem = _pg_unavailable()
    if problem is None:
        return
    if REQUIRE_PG:
        pytest.fail(f"{problem} (CTXLEDGER_REQUIRE_PG=1 makes PostgreSQL mandatory)")
    pytest.skip(problem)


def pg_schema_url(schema: str) -> str:
    """``PG_URL`` with ``search_path`` pinned to ``schema``."""
    url = sa.engine.make_url(PG_URL)
    return url.update_query_dict({"options": f"-csearch_path={schema}"}).render_as_string(
        hide_password=False)


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A PostgreSQL URL whose tables live in a throwaway schema."""
    require_postgres()
    schema = f"t_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(PG_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f'CREATE SCHEMA "{schema}"')
    try:
        yield pg_schema_url(schema)
    finally:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP SCHEMA "{schema}" CASCADE')
        admin.dispose()


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    """A SQLite file in a temporary directory."""
    return f"sqlite:///{tmp_path / 'ledger.db'}"


BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
"""The parameters of a fixture that runs once per backend."""


@pytest.fixture(scope="session")
def templates() -> Templates:
    """The session's migrated template databases (each built on first use), shared with
    ``helpers.databases.module_database``."""
    return shared_templates(PG_URL)


@contextmanager
def fresh_database(backend: str, templates: Templates, directory: Path) -> Iterator[str]:
    """A fresh, fully migrated, empty database of ``backend`` (a copy of its template);
    for PostgreSQL it skips (or, in CI, fails) without a server, like ``pg_url``."""
    if backend == "postgres":
        require_postgres()
    with templates.database(backend, directory) as url:
        yield url


@pytest.fixture(params=BACKENDS)
def db_url(request: pytest.FixtureRequest, templates: Templates,
           tmp_path: Path) -> Iterator[str]:
    """A fresh, fully migrated, empty database URL, once per backend."""
    with fresh_database(request.param, templates, tmp_path) as url:
        yield url


@pytest.fixture(params=BACKENDS)
def empty_db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A database URL nothing has been created in yet, once per backend."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'ledger.db'}"
    else:
        yield request.getfixturevalue("pg_url")


@pytest.fixture
def ledger(db_url: str) -> Iterator[Ledger]:
    """An open ledger on each backend."""
    with Ledger.open(db_url) as opened:
        yield opened
