"""Opening a ledger by URL, every way a database can be unusable reported as one line.

A missing driver, an unreachable server, a schema from a newer release: each becomes
``DatabaseUnavailable`` (a ``LedgerError``) naming the URL, password masked. The CLI and
the demo open their ledgers here; ``explain`` says any expected failure in one line, for
the CLI and the HTTP service alike.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from ctxledger._config import resolve_db_url
from ctxledger.store.errors import LedgerError

if TYPE_CHECKING:
    from ctxledger._ledger import Ledger

_MAX_MESSAGE = 400


def one_line(text: str) -> str:
    """Collapse whitespace (drivers put newlines and tabs in messages) and cap the length."""
    flat = re.sub(r"\s+", " ", text).strip()
    return flat if len(flat) <= _MAX_MESSAGE else flat[: _MAX_MESSAGE - 3] + "..."


# SQLAlchemy and Alembic are imported where they are needed, not at module import: the
# CLI imports this module, and ``ctxledger --help`` must start fast.


def safe_url(url: str) -> str:
    """The URL for messages, with any password masked (``store.sql_engine.safe_url``)."""
    from ctxledger.store.sql_engine import safe_url as masked

    return masked(url)


class _NeverRaised(Exception):
    """Stands for Alembic's ``CommandError`` while Alembic is not imported."""


def alembic_command_error() -> type[Exception]:
    """Alembic's ``CommandError``, without importing Alembic (about 200 ms) to learn it:
    when Alembic was never imported, nothing can have raised it."""
    module = sys.modules.get("alembic.util.exc")
    found = getattr(module, "CommandError", None)
    return found if isinstance(found, type) and issubclass(found, Exception) else _NeverRaised


def database_error_message(exc: BaseException) -> str:
    """The driver's own words for a database failure, without SQLAlchemy's SQL dump."""
    import sqlalchemy as sa

    if isinstance(exc, sa.exc.DBAPIError) and exc.orig is not None:
        return one_line(str(exc.orig)) or type(exc.orig).__name__
    return one_line(str(exc)) or type(exc).__name__


class DatabaseUnavailable(LedgerError):
    """The database named by the URL cannot be opened, migrated or reached."""

    def __init__(self, url: str, reason: str) -> None:
        super().__init__(f"database {safe_url(url)}: {reason}")


@contextmanager
def database_errors(url: str) -> Iterator[None]:
    """Turn every way a database can be unusable into ``DatabaseUnavailable`` naming ``url``."""
    import sqlalchemy as sa

    CommandError = alembic_command_error()
    try:
        yield
    except LedgerError:
        raise
    except sa.exc.SQLAlchemyError as exc:
        raise DatabaseUnavailable(url, database_error_message(exc)) from None
    except CommandError as exc:
        # e.g. a database written by a newer release, at a revision this one does not know.
        raise DatabaseUnavailable(url, f"schema: {one_line(str(exc))}") from None
    except ImportError as exc:
        raise DatabaseUnavailable(url, f"driver not installed: {one_line(str(exc))}") from None


def open_ledger(explicit_url: str | None, **options: Any) -> Ledger:
    """``Ledger.open`` with opening failures reported as one line naming the URL.

    ``explicit_url`` falls back to ``CTXLEDGER_DB`` and then the default SQLite file.
    Write commands use this: a database that does not exist yet is created.
    """
    from ctxledger._ledger import Ledger

    url = resolve_db_url(explicit_url)
    with database_errors(url):
        return Ledger.open(url, **options)


def open_existing(explicit_url: str | None, **options: Any) -> Ledger:
    """``open_ledger`` for read commands: a database that does not exist is an error
    (``no ctxledger database at ...``), never created by a read."""
    return open_ledger(explicit_url, create=False, **options)


def explain(exc: BaseException) -> str | None:
    """The one-line message for an expected failure, or None when ``exc`` is a bug: what
    the CLI prints after ``error:`` and the HTTP service sends as a problem's detail."""
    if isinstance(exc, LedgerError):
        return one_line(str(exc))
    import sqlalchemy as sa

    CommandError = alembic_command_error()
    if isinstance(exc, sa.exc.SQLAlchemyError):
        return f"database error: {database_error_message(exc)}"
    if isinstance(exc, CommandError):
        return f"database schema: {one_line(str(exc))}"
    if isinstance(exc, OSError):
        return one_line(str(exc))
    return None
