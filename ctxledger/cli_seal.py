"""``ctxledger seal`` and ``ctxledger anchor``: the global chain, and a copy to keep outside.

Registered on the main Typer app by ``ctxledger.cli``; ``verify --anchor`` is the check.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

from ctxledger.cli_errors import open_ledger, reports_errors

if TYPE_CHECKING:
    from ctxledger.store.seal import Seal


def _db(ctx: typer.Context) -> str | None:
    """The global ``--db`` (``ctxledger.cli.Options``, read by name to avoid a cycle)."""
    return getattr(ctx.obj, "db", None)


def seal_record(seal: Seal | None, head_sealed: Seal | None) -> dict[str, object]:
    """What ``seal`` prints: the seal written (or the last one, when nothing was new)."""
    from ctxledger.store.clock import format_utc

    shown = seal or head_sealed
    if shown is None:
        return {"sealed": False, "seal": None}
    return {"sealed": seal is not None, "seal": shown.seq, "position": shown.position,
            "events": shown.events, "hash": shown.hash, "key_id": shown.key_id,
            "sealed_at": format_utc(shown.sealed_at)}


@reports_errors
def seal(ctx: typer.Context) -> None:
    """Seal the log up to its head: chain every event's hash in position order.

    Uses CTXLEDGER_CHAIN_KEY (if set) to make the links HMACs. Prints the seal as JSON;
    "sealed": false when nothing was new since the last seal.
    """
    from ctxledger import render
    from ctxledger.store.seal import last_seal

    with open_ledger(_db(ctx)) as ledger:
        written = ledger.seal()
        with ledger.log.connection() as conn:
            last = last_seal(conn)
    typer.echo(render.dumps(seal_record(written, last)))


@reports_errors
def anchor(ctx: typer.Context) -> None:
    """Seal, then print the last seal as one line to keep outside the database.

    Later, `ctxledger verify --anchor LINE|FILE` proves the log still extends it.
    """
    with open_ledger(_db(ctx)) as ledger:
        found = ledger.anchor()
    typer.echo(found.line())


def register(app: typer.Typer) -> None:
    """Add ``seal`` and ``anchor`` to ``app``."""
    app.command("seal")(seal)
    app.command("anchor")(anchor)
