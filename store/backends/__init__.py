"""One strategy per database: ``backend_for(engine)`` chooses it, once, here.

Each database's differences live in its own module (``sqlite``, ``postgresql``), behind
``base.Backend``; advisory-lock keys live in ``locks``. A backend module is imported the
first time an engine of its kind is seen, so a SQLite user never loads PostgreSQL's code.
Adding a database: a module with a ``BACKEND``, one line in ``_MODULES``, and its URL in
the contract suite's list (``tests/backends/test_contract.py``).
"""

from __future__ import annotations

import importlib

import sqlalchemy as sa
from sqlalchemy.engine import URL, Connection, Dialect, Engine

from ctxledger.store.backends.base import Backend, Connections
from ctxledger.store.errors import LedgerError

__all__ = ["Backend", "Connections", "PositionType", "backend_for", "backend_for_url",
           "backend_named"]

_MODULES = {
    "sqlite": "ctxledger.store.backends.sqlite",
    "postgresql": "ctxledger.store.backends.postgresql",
}
"""Each supported database (by SQLAlchemy's name) and the module of its ``BACKEND``."""

_CHOSEN: dict[str, Backend] = {}
_ATTRIBUTE = "_ctxledger_backend"

PositionType: sa.types.TypeEngine[int] = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
"""Log positions: BIGINT; INTEGER on SQLite, whose ``INTEGER PRIMARY KEY`` is the rowid
(64 bits there too)."""


def backend_named(name: str) -> Backend:
    """The backend of the database SQLAlchemy calls ``name``; ``LedgerError`` for any other."""
    found = _CHOSEN.get(name)
    if found is None:
        module = _MODULES.get(name)
        if module is None:
            raise LedgerError(f"unsupported database {name!r}: use sqlite or postgresql+psycopg")
        backend: Backend = importlib.import_module(module).BACKEND
        found = _CHOSEN.setdefault(name, backend)
    return found


def backend_for_url(url: URL) -> Backend:
    """The backend of the database ``url`` names (its scheme)."""
    return backend_named(url.get_backend_name())


def backend_for(bind: Engine | Connection | Dialect) -> Backend:
    """The backend of ``bind``'s database, kept on its dialect: one attribute read after
    the first call (each engine has its own dialect object, which lives as long as it)."""
    dialect = bind if isinstance(bind, Dialect) else bind.dialect
    found: Backend | None = getattr(dialect, _ATTRIBUTE, None)
    if found is None:
        found = backend_named(dialect.name)
        setattr(dialect, _ATTRIBUTE, found)
    return found
