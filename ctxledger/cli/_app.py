"""The ``ctxledger`` command line: JSON/JSONL for scripts, ``--format text`` for people.

Every command is a thin shell over ``Ledger``: parse arguments, call the ledger, print.
Exit codes: 0 success; 1 a domain error (one ``error: ...`` line on stderr, nothing
written); 2 a usage error.

Start-up time matters (``ctxledger --version`` in well under 150 ms): the command modules
import only Typer at the top. rich, SQLAlchemy, pydantic, tiktoken and the ledger are
imported inside the commands that use them.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer
from typer.core import TyperGroup

import ctxledger
from ctxledger._config import DEFAULT_DB_URL, ENV_VAR
from ctxledger.cli import (
    _cards,
    _context,
    _erase,
    _hook,
    _io,
    _jobs,
    _log,
    _maintenance,
    _mcp,
    _seal,
    _serve,
    _timetravel,
)
from ctxledger.cli._errors import reports_errors
from ctxledger.cli._options import DB_OPTION, Options, hoist_db

GROUPS = (_log, _context, _maintenance, _jobs, _io, _seal, _erase, _timetravel, _serve, _mcp,
          _hook)
"""The command groups, in ``--help`` order (each lists its commands in order)."""


class CtxledgerGroup(TyperGroup):
    """The root command: accepts ``--db`` after the command name as well as before it."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        """Hoist a trailing ``--db`` before parsing (see ``hoist_db``)."""
        hoisted = hoist_db(list(args), self)
        if hoisted and hoisted[-1] == DB_OPTION and "--" not in hoisted[:-1]:
            # Left after the command without a value, click would call it an unknown option
            # of that command; say what is wrong instead.
            raise typer.BadParameter("needs a value: --db URL", ctx=ctx,
                                     param_hint=f"'{DB_OPTION}'")
        return super().parse_args(ctx, hoisted)


app = typer.Typer(
    name="ctxledger",
    cls=CtxledgerGroup,
    help="Event-sourced session store for LLM applications.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"ctxledger {ctxledger.__version__}")
        raise typer.Exit()


@app.callback()
def root(
    ctx: typer.Context,
    db: Annotated[str | None, typer.Option(
        "--db", metavar="URL",
        help=f"Database URL (before or after the command). Default: ${ENV_VAR}, else"
             f" {DEFAULT_DB_URL}. PostgreSQL (the postgres extra):"
             " postgresql+psycopg://user@host/db.")] = None,
    version: Annotated[bool, typer.Option(
        "--version", callback=_version, is_eager=True,
        help="Print the version and exit.")] = False,
) -> None:
    """Event-sourced session store for LLM applications."""
    if db is not None and not db.strip():
        raise typer.BadParameter("must not be empty", param_hint="'--db'")
    ctx.obj = Options(db=db)


def _register(target: typer.Typer) -> None:
    """Add every group's commands, each wrapped so a failure ends as one ``error:`` line,
    then the commands with subcommands (``card import``...)."""
    for group in GROUPS:
        for name, command in group.COMMANDS.items():
            target.command(name)(reports_errors(command))
    for name, (help_text, commands) in {**_cards.SUBCOMMANDS,
                                        **_serve.SUBCOMMANDS}.items():
        sub = typer.Typer(name=name, help=help_text, no_args_is_help=True,
                          rich_markup_mode=None)
        for sub_name, command in commands.items():
            sub.command(sub_name)(reports_errors(command))
        target.add_typer(sub)


_register(app)


def main() -> None:
    """Console-script entry point (``ctxledger``)."""
    app()
