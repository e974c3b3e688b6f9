"""Extra databases for tests: one shared by a module, or a sibling of a test's ``db_url``.

PostgreSQL databases are throwaway schemas reached through ``search_path``, exactly like
the ``pg_url`` fixture in ``tests/conftest.py``, whose server settings they reuse.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import sqlalchemy as sa

from helpers.templates import shared


@contextmanager
def pg_schema(base_url: str | sa.URL) -> Iterator[str]:
    """Yield a URL whose tables live in a new schema of ``base_url``'s database; drop it."""
    base = sa.engine.make_url(base_url).difference_update_query(["options"])
    schema = f"s_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(base, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'CREATE SCHEMA "{schema}"')
        try:
            yield base.update_query_dict({"options": f"-csearch_path={schema}"}).render_as_string(
                hide_password=False)
        finally:
            with admin.connect() as conn:
                conn.exec_driver_sql(f'DROP SCHEMA "{schema}" CASCADE')
    finally:
        admin.dispose()


@contextmanager
def sibling_database(db_url: str, directory: Path) -> Iterator[str]:
    """Yield the URL of a fresh database beside ``db_url`` (same backend), then drop it."""
    if sa.engine.make_url(db_url).get_backend_name() == "sqlite":
        yield f"sqlite:///{directory / f'sibling-{uuid.uuid4().hex[:8]}.db'}"
        return
    with pg_schema(db_url) as url:
        yield url


@contextmanager
def module_database(backend: str, directory: Path) -> Iterator[str]:
    """A fresh, migrated database for a module-scoped fixture: ``"sqlite"`` or
    ``"postgres"``, a copy of the session's template (``helpers.templates``).

    For PostgreSQL it skips (or, with ``CTXLEDGER_REQUIRE_PG=1``, fails) like ``pg_url``.
    """
    from conftest import PG_URL, require_postgres  # the one place the server is configured

    if backend == "postgres":
        require_postgres()
    with shared(PG_URL).database(backend, directory) as url:
        yield url
