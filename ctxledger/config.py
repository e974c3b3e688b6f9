"""Where the database is: ``--db``, then ``CTXLEDGER_DB``, then ``sqlite:///ctxledger.db``."""

from __future__ import annotations

import os

DEFAULT_DB_URL = "sqlite:///ctxledger.db"
ENV_VAR = "CTXLEDGER_DB"


def resolve_db_url(explicit: str | None = None) -> str:
    """The database URL to use, by precedence: argument, environment, default."""
    if explicit:
        return explicit
    return os.environ.get(ENV_VAR) or DEFAULT_DB_URL
