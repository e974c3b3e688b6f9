"""Create or upgrade a database to the newest schema with the bundled Alembic scripts."""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.engine import Engine


def script_location() -> Path:
    """The migrations folder: inside the wheel, or at the top of a source checkout."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "migrations", here.parent / "migrations"):
        if (candidate / "env.py").is_file():
            return candidate
    raise RuntimeError("ctxledger's migrations are missing from this installation")


def alembic_config(connection: sa.Connection | None = None) -> Config:
    """An Alembic config pointing at the bundled scripts (no alembic.ini needed)."""
    cfg = Config()
    cfg.set_main_option("script_location", str(script_location()))
    if connection is not None:
        cfg.attributes["connection"] = connection
    return cfg


def head_revision() -> str:
    """The newest revision the installed package knows."""
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None
    return head


def current_revision(engine: Engine) -> str | None:
    """The revision a database is at (None when it has no schema yet)."""
    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Upgrade ``engine``'s database to ``revision``, keeping its data."""
    if revision == "head" and current_revision(engine) == head_revision():
        return  # the common case: nothing to do, and no lock to wait for
    with engine.begin() as conn:
        if conn.dialect.name == "postgresql":
            # Concurrent openers of the same schema wait here instead of racing on DDL.
            conn.exec_driver_sql(
                "SELECT pg_advisory_xact_lock(7422853, hashtext(current_schema()))")
        command.upgrade(alembic_config(conn), revision)
