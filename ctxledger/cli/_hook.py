"""``ctxledger hook``: one Claude Code hook event from stdin (``ctxledger._hook``).

It runs on every tool call and must never block the agent: whatever goes wrong, it
prints one line on stderr and exits 0, having written nothing half-done.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Annotated

import typer

from ctxledger.cli._options import db_of

AGENT_HELP = ("Scope the SessionStart injection to agent type A's manifest too (the state"
              " as 'ctxledger state --agent' gives it, with _agent and _savings).")


def hook(
    ctx: typer.Context,
    agent: Annotated[str | None, typer.Option(
        "--agent", metavar="A", envvar="CTXLEDGER_AGENT", show_envvar=True,
        help=AGENT_HELP)] = None,
) -> None:
    """Handle one Claude Code hook event (JSON on stdin); for a Claude Code plugin.

    SessionStart prints the session profile's injection for the project as
    hookSpecificOutput.additionalContext; SubagentStart the state scoped by the spawned
    agent's manifest; PostToolUse records tool.used; UserPromptSubmit the prompt; Stop and
    SessionEnd end the session. The scope is the project
    ($CTXLEDGER_SCOPE, else a hash of cwd); the database --db, else $CTXLEDGER_DB, else
    $XDG_DATA_HOME/ctxledger/ledger.db. Always exits 0: an error is one line on stderr."""
    try:
        output = _run(typer.get_binary_stream("stdin").read(), db_of(ctx),
                      agent.strip() or None if agent is not None else None)
    except Exception as exc:  # fail open: the agent must go on
        from ctxledger._open import explain, one_line

        message = explain(exc) or f"internal error: {type(exc).__name__}: {one_line(str(exc))}"
        typer.echo(f"ctxledger hook: {message}", err=True)
        return
    if output is not None:
        typer.echo(output)


def _run(raw: bytes, db: str | None, agent: str | None) -> str | None:
    """Parse, then open the ledger and act: a bad event never touches the database."""
    import json

    from ctxledger._hook import handle, parse_event
    from ctxledger._open import open_ledger
    from ctxledger._project import project_scope, user_db_url

    event = parse_event(raw)
    url = db or user_db_url()
    # No vocabulary up front: a tool use counts no tokens, and a session start loads one
    # only for a text whose count is not cached yet.
    with open_ledger(url, load_vocabulary=False) as ledger:
        found = handle(event, ledger, project_scope(event.cwd, environ=os.environ), agent)
    return None if found is None else json.dumps(found, ensure_ascii=False)


COMMANDS: dict[str, Callable[..., None]] = {"hook": hook}
"""This group's commands by name, in ``--help`` order."""
