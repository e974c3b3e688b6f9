"""``ctxledger hook`` without Typer: the console script's route for the hook.

Claude Code starts the hook on every tool call, and a tool use must cost little more
than starting Python (``ctxledger._spool``). Typer, click and the command modules take
tens of milliseconds to import, so ``main`` sends a plain ``ctxledger [--db URL] hook
[--agent A] [--drain]`` here first; anything else (``--help``, an unknown option) goes
to the Typer app, which has the same ``hook`` command and says what is wrong. This route
uses the database's warm worker (``ctxledger._hook_worker``) and starts one when none
runs; the Typer command runs every event in its own process.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from typing import BinaryIO, NamedTuple, TextIO

DB_OPTION = "--db"
AGENT_OPTION = "--agent"
AGENT_ENV = "CTXLEDGER_AGENT"


class HookArguments(NamedTuple):
    """A plain ``ctxledger hook`` command line."""

    db: str | None
    agent: str | None
    drain: bool
    worker: bool = False
    stop_worker: bool = False


def hook_arguments(argv: Sequence[str], environ: Mapping[str, str] | None = None
                   ) -> HookArguments | None:
    """``argv`` (without the program) as a hook command line, or None when it is any
    other command or has anything this route does not read (Typer handles those)."""
    env = os.environ if environ is None else environ
    db: str | None = None
    agent: str | None = None
    drain = worker = stop_worker = False
    command = False
    args = list(argv)
    index = 0
    while index < len(args):
        token = args[index]
        name, equals, value = token.partition("=")
        if name in (DB_OPTION, AGENT_OPTION) and not equals:
            if index + 1 >= len(args):
                return None
            value = args[index + 1]
            index += 1
        if name == DB_OPTION and token.startswith("--"):
            if not value.strip():
                return None  # Typer says what is wrong with an empty --db
            db = value
        elif name == AGENT_OPTION and command:
            agent = value
        elif token == "hook" and not command:
            command = True
        elif token == "--drain" and command:
            drain = True
        elif token == "--worker" and command:
            worker = True
        elif token == "--stop-worker" and command:
            stop_worker = True
        else:
            return None
        index += 1
    if not command or (worker and not drain) or (stop_worker and (drain or worker)):
        return None  # Typer says what is wrong
    if agent is None:
        agent = env.get(AGENT_ENV)
    return HookArguments(db, (agent.strip() or None) if agent is not None else None, drain,
                         worker, stop_worker)


def run_hook(arguments: HookArguments, stdin: BinaryIO, stdout: TextIO,
             stderr: TextIO) -> None:
    """Run the hook as the Typer command would: output on ``stdout``, any failure as one
    line on ``stderr``; it never raises (the hook exits 0)."""
    from ctxledger._hook import drain_spool, fail_open_message, read_event, run, stop
    from ctxledger._warnings import one_line_warnings

    def report(line: str) -> None:
        print(f"ctxledger hook: {line}", file=stderr)
    try:
        with one_line_warnings(report):
            if arguments.stop_worker:
                print(stop(arguments.db), file=stdout)
                return
            if arguments.drain:
                drain_spool(arguments.db, report=report, worker=arguments.worker)
                return
            output = run(read_event(stdin), arguments.db, arguments.agent, report=report,
                         worker=True)
    except Exception as exc:  # fail open: the agent must go on
        print(fail_open_message(exc), file=stderr)
        return
    if output is not None:
        print(output, file=stdout)
        stdout.flush()


def fast_main() -> bool:
    """Run ``sys.argv`` as a hook when it is one (True), else do nothing (False)."""
    arguments = hook_arguments(sys.argv[1:])
    if arguments is None:
        return False
    run_hook(arguments, sys.stdin.buffer, sys.stdout, sys.stderr)
    return True
