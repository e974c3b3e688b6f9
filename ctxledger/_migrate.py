"""Create or upgrade a database to the newest schema with the bundled Alembic scripts."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from ctxledger.store.backends import backend_for, locks

if TYPE_CHECKING:
    from alembic.config import Config

# Alembic is imported only when there is migrating to do: opening a database that is
# already at the head (every CLI call) checks the revision with one query and a scan of
# the version files' headers, which costs far less than importing Alembic.
_REVISION_LINE = re.compile(r'^(down_revision|revision)\s*=\s*(None|"[^"]*"|\'[^\']*\')\s*$',
                            re.MULTILINE)


def script_location() -> Path:
    """The migrations folder: inside the wheel, or at the top of a source checkout."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "migrations", here.parent / "migrations"):
        if (candidate / "env.py").is_file():
            return candidate
    raise RuntimeError("ctxledger's migrations are missing from this installation")


def alembic_config(connection: sa.Connection | None = None) -> Config:
    """An Alembic config pointing at the bundled scripts (no alembic.ini needed)."""
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(script_location()))
    if connection is not None:
        cfg.attributes["connection"] = connection
    return cfg


def head_revision() -> str:
    """The newest revision the installed package knows."""
    from alembic.script import ScriptDirectory

    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None
    return head


def current_revision(engine: Engine) -> str | None:
    """The revision a database is at (None when it has no schema yet)."""
    from alembic.runtime.migration import MigrationContext

    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Upgrade ``engine``'s database to ``revision``, keeping its data."""
    if revision == "head" and _at_head(engine):
        return  # the common case: nothing to do, and no lock to wait for
    from alembic import command

    with engine.begin() as conn:
        # Concurrent openers of the same schema wait here instead of racing on DDL.
        backend_for(conn).lock(conn, locks.MIGRATIONS)
        command.upgrade(alembic_config(conn), revision)


@cache
def linear_head() -> str | None:
    """The head revision read from the version files' ``revision``/``down_revision``
    lines, without Alembic; None when the history is not one straight line (then only
    Alembic can say)."""
    revisions: dict[str, str | None] = {}
    for path in sorted((script_location() / "versions").glob("*.py")):
        found = dict(_REVISION_LINE.findall(path.read_text(encoding="utf-8")))
        if "revision" not in found or "down_revision" not in found:
            return None
        down = found["down_revision"]
        revisions[found["revision"].strip("\"'")] = None if down == "None" else down.strip("\"'")
    parents = [down for down in revisions.values() if down is not None]
    heads = [rev for rev in revisions if rev not in parents]
    if len(heads) != 1 or len(set(parents)) != len(parents):
        return None
    return heads[0]


def at_head(engine: Engine) -> bool:
    """Whether ``engine``'s database is at the newest revision this release knows."""
    return _at_head(engine)


def _at_head(engine: Engine) -> bool:
    """True when the database's ``alembic_version`` is the head (one query, no Alembic)."""
    head = linear_head()
    if head is None:
        return current_revision(engine) == head_revision()
    with engine.connect() as conn:
        if not sa.inspect(conn).has_table("alembic_version"):
            return False
        versions = [row[0] for row in conn.exec_driver_sql(
            "SELECT version_num FROM alembic_version")]
    return versions == [head]
