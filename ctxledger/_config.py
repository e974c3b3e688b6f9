"""Where the database is, for the command line, the hook, the MCP server and ``Ledger.open``:
``--db``, then ``$CTXLEDGER_DB``, then the project's ``ctxledger.db`` (in the working
folder) when it exists, then ``$XDG_DATA_HOME/ctxledger/ledger.db``
(``ctxledger._project.default_db_url``)."""

from __future__ import annotations

import os
from collections.abc import Mapping

DEFAULT_DB_URL = ("the project's ./ctxledger.db if it exists, else"
                  " $XDG_DATA_HOME/ctxledger/ledger.db")
"""How the help names the default (``ctxledger._project.default_db_url`` finds it)."""
ENV_VAR = "CTXLEDGER_DB"


def resolve_db_url(explicit: str | None = None, *, folder: str | os.PathLike[str] | None = None,
                   environ: Mapping[str, str] | None = None) -> str:
    """The database URL to use: ``explicit`` when given, else the default of the project
    at ``folder`` (None: the working folder) as ``default_db_url`` finds it."""
    if explicit:
        return explicit
    from ctxledger._project import default_db_url

    return default_db_url(folder, environ=environ)


# Defaults the CLI shows in its help. They live here, not in the modules that use them, so
# that ``ctxledger --help`` does not import SQLAlchemy and pydantic to print them.
DEFAULT_RETENTION_DAYS = 30
"""Raw tool-usage rows the rollup keeps, in rolled days (``RollupPolicy.retention_days``)."""
MAX_USAGE_DAYS = 366
"""The longest span ``usage`` reports, so a typo cannot ask for a century of raw reads."""
DEFAULT_USAGE_DAYS = 7
"""The span ``usage`` reports by default, in UTC days ending today."""
