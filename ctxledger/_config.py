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


# Defaults the CLI shows in its help. They live here, not in the modules that use them, so
# that ``ctxledger --help`` does not import SQLAlchemy and pydantic to print them.
DEFAULT_RETENTION_DAYS = 30
"""Raw tool-usage rows the rollup keeps, in rolled days (``RollupPolicy.retention_days``)."""
MAX_USAGE_DAYS = 366
"""The longest span ``usage`` reports, so a typo cannot ask for a century of raw reads."""
DEFAULT_USAGE_DAYS = 7
"""The span ``usage`` reports by default, in UTC days ending today."""
