"""``ctxledger hook``: one Claude Code hook event from stdin (``ctxledger._hook``).

It runs on every tool call and must never block the agent: whatever goes wrong, it
prints one line on stderr and exits 0, having written nothing half-done. The console
script runs it without importing Typer (``ctxledger._hook._script``); this command is the
same hook (``ctxledger._hook.run_hook``) for ``--help`` and for callers of the Typer app.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Annotated

import typer

from ctxledger.cli._options import db_of

AGENT_HELP = ("Scope the SessionStart injection to agent type A's manifest too (the state"
              " as 'ctxledger state --agent' gives it, with _agent and _savings).")


DRAIN_HELP = ("Append the spooled tool uses to the log and exit (a tool use only spools;"
              " the hook starts this in the background). Reads no event.")
WORKER_HELP = ("With --drain: then stay on as the database's warm worker, which runs the"
               " hook's events until idle for $CTXLEDGER_HOOK_WORKER_IDLE seconds"
               " (default 1800; 0: no worker). The hook starts it in the background.")
STOP_WORKER_HELP = ("Ask the database's worker to exit (after editing ctxledger's code in"
                    " place: an upgrade is noticed; or to free its memory) and say whether"
                    " one ran.")


def hook(
    ctx: typer.Context,
    agent: Annotated[str | None, typer.Option(
        "--agent", metavar="A", envvar="CTXLEDGER_AGENT", show_envvar=True,
        help=AGENT_HELP)] = None,
    drain: Annotated[bool, typer.Option("--drain", help=DRAIN_HELP)] = False,
    worker: Annotated[bool, typer.Option("--worker", help=WORKER_HELP)] = False,
    stop_worker: Annotated[bool, typer.Option("--stop-worker", help=STOP_WORKER_HELP)
                           ] = False,
) -> None:
    """Handle one Claude Code hook event (JSON on stdin); for a Claude Code plugin.

    SessionStart prints the session profile's injection for the project as
    hookSpecificOutput.additionalContext; SubagentStart the state scoped by the spawned
    agent's manifest; PostToolUse and PostToolUseFailure spool tool.used (a background
    drainer, or the next other event, appends it); UserPromptSubmit records the prompt;
    Stop records the turn (the transcript's new messages); SessionEnd ends the session
    with the summary its transcript gives. The scope is the project ($CTXLEDGER_SCOPE,
    else a hash of cwd); the database --db, else $CTXLEDGER_DB, else the project's
    ./ctxledger.db when it exists, else $XDG_DATA_HOME/ctxledger/ledger.db. The console
    script hands events to the database's warm worker when one runs (and starts one in
    the background): a session start then skips loading the database stack. Always
    exits 0: an error is one line on stderr."""
    from ctxledger._hook import HookArguments, run_hook

    if worker and not drain:
        raise typer.BadParameter("--worker goes with --drain", param_hint="--worker")
    if stop_worker and (drain or worker):
        raise typer.BadParameter("--stop-worker goes alone", param_hint="--stop-worker")
    arguments = HookArguments(db_of(ctx), agent.strip() or None if agent is not None else None,
                              drain, worker, stop_worker)
    run_hook(arguments, typer.get_binary_stream("stdin"), sys.stdout, sys.stderr,
             worker=False)


COMMANDS: dict[str, Callable[..., None]] = {"hook": hook}
"""This group's commands by name, in ``--help`` order."""
