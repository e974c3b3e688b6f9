"""``ctxledger seal`` and ``ctxledger anchor``: the global chain, and a copy to keep outside.

``verify --anchor`` is the check.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import typer

from ctxledger._open import open_ledger
from ctxledger.cli._options import db_of

if TYPE_CHECKING:
    from ctxledger.store.seal import Seal


def seal_record(seal: Seal | None, head_sealed: Seal | None) -> dict[str, object]:
    """What ``seal`` prints: the seal written (or the last one, when nothing was new)."""
    from ctxledger.store.clock import format_utc

    shown = seal or head_sealed
    if shown is None:
        return {"sealed": False, "seal": None}
    return {"sealed": seal is not None, "seal": shown.seq, "position": shown.position,
            "events": shown.events, "hash": shown.hash, "key_id": shown.key_id,
            "sealed_at": format_utc(shown.sealed_at)}


def seal(ctx: typer.Context) -> None:
    """Seal the log up to its head: chain every event's hash in position order.

    Uses CTXLEDGER_CHAIN_KEY (if set) to make the links HMACs. Prints the seal as JSON;
    "sealed": false when nothing was new since the last seal.
    """
    from ctxledger import render
    from ctxledger.store.seal import last_seal

    with open_ledger(db_of(ctx)) as ledger:
        written = ledger.seal()
        with ledger.log.connection() as conn:
            last = last_seal(conn)
    typer.echo(render.dumps(seal_record(written, last)))


def anchor(ctx: typer.Context) -> None:
    """Seal, then print the last seal as one line to keep outside the database.

    Later, `ctxledger verify --anchor LINE|FILE` proves the log still extends it.
    """
    with open_ledger(db_of(ctx)) as ledger:
        found = ledger.anchor()
    typer.echo(found.line())


COMMANDS: dict[str, Callable[..., None]] = {"seal": seal, "anchor": anchor}
"""This group's commands by name, in ``--help`` order."""
