"""``ctxledger erase``: one session's or one scope's content made unrecoverable, the log
still verifying (docs/erasure.md)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

import typer

from ctxledger._open import open_existing
from ctxledger.cli._console import progress_bar
from ctxledger.cli._options import db_of


def erase(
    ctx: typer.Context,
    session: Annotated[str | None, typer.Option(
        "--session", metavar="SESSION", help="Erase this session's events.")] = None,
    scope: Annotated[str | None, typer.Option(
        "--scope", metavar="SCOPE",
        help="Erase the scope's own stream and every session that joined it.")] = None,
    reason: Annotated[str | None, typer.Option(
        "--reason", metavar="TEXT",
        help="Why (kept in the erasure record; required).")] = None,
) -> None:
    """Erase the content of a session or a scope (and of the sessions forked from them):
    messages, tool inputs, cards, observations, snippets, their projection rows and
    caches, and the database's free pages, WAL or dead tuples. Hash chains, seals and
    anchors still verify; an erasure.completed event records what, when and why. Prints
    the erasure as JSON. On PostgreSQL the tables are rewritten online with pg_repack
    where its extension is installed (CTXLEDGER_PG_REPACK names the client, or "off"),
    else by VACUUM FULL, which holds each table for its rewrite.
    """
    from ctxledger import render

    with progress_bar("catching up") as catching_up, \
            open_existing(db_of(ctx), progress=catching_up) as ledger, \
            progress_bar("erasing") as erasing:
        done = ledger.erase(session=session, scope=scope, reason=reason or "",
                            progress=erasing)
    typer.echo(render.dumps(done.to_json()))


COMMANDS: dict[str, Callable[..., None]] = {"erase": erase}
"""This group's commands by name, in ``--help`` order."""
