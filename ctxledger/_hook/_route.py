"""``ctxledger hook``'s one entry, ``run_hook``, and the console script's route to it.

Claude Code starts the hook on every tool call, and a tool use must cost little more
than starting Python. Typer, click and the command modules take tens of milliseconds to
import, so the console script (``_script``) reads a plain ``ctxledger [--db URL] hook
[--agent A] [--drain [--worker]] [--stop-worker]`` itself, spools a tool use itself when
it can (``_fast``), and sends every other hook event here; anything else (``--help``, an
unknown option) goes to the Typer app, whose ``hook`` command calls ``run_hook`` too.
The console script uses the database's warm worker (``_worker``) and starts one when
none runs; the Typer command runs every event in its own process.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import IO, TYPE_CHECKING, NamedTuple, TextIO

from ctxledger._hook import _fast

if TYPE_CHECKING:
    from ctxledger._ledger import Ledger

AGENT_ENV = _fast.AGENT_ENV
"""The agent whose manifest scopes the injection, when ``--agent`` is not given."""


class HookArguments(NamedTuple):
    """A ``ctxledger hook`` command line."""

    db: str | None
    agent: str | None
    drain: bool = False
    worker: bool = False
    stop_worker: bool = False


def hook_arguments(argv: Sequence[str], environ: Mapping[str, str] | None = None
                   ) -> HookArguments | None:
    """``argv`` (without the program) as a hook command line, or None when it is any
    other command or has anything this route does not read (Typer handles those):
    ``_fast.hook_argv``, the one reading of it."""
    found = _fast.hook_argv(argv, os.environ if environ is None else environ)
    return None if found is None else HookArguments(*found)


def run_hook(arguments: HookArguments, stdin: IO[bytes], stdout: TextIO, stderr: TextIO, *,
             worker: bool, environ: Mapping[str, str] | None = None,
             drainer: bool = True) -> None:
    """What ``ctxledger hook`` does, for every route: the event on ``stdin`` (or the
    drain, or the stop the arguments ask for), its output on ``stdout``, and any failure
    as one ``ctxledger hook: ...`` line on ``stderr``. It never raises: the hook exits
    0 whatever happens, so the agent goes on. With ``worker`` (the console script) the
    database's warm worker is asked first, and started when none runs. Without
    ``drainer`` a tool use is only spooled, for the next other event to drain (no
    process is started: how the tests run events in one process)."""
    from ctxledger._warnings import one_line_warnings

    def report(line: str) -> None:
        print(f"ctxledger hook: {line}", file=stderr)
    try:
        with one_line_warnings(report):
            if arguments.stop_worker:
                print(stop(arguments.db, environ=environ), file=stdout)
                return
            if arguments.drain:
                drain_spool(arguments.db, environ=environ, report=report,
                            worker=arguments.worker)
                return
            output = run(read_event(stdin), arguments.db, arguments.agent,
                         environ=environ, report=report, worker=worker, drainer=drainer)
    except Exception as exc:  # fail open: the agent must go on
        from ctxledger._hook._handle import fail_open_message

        print(fail_open_message(exc), file=stderr)
        return
    if output is not None:
        print(output, file=stdout)
        stdout.flush()


def read_event(stream: IO[bytes]) -> bytes:
    """The hook's stdin, at most ``$CTXLEDGER_MAX_INPUT_BYTES`` (``ctxledger.io._bounded``);
    a larger event is a ``HookInputError`` (fail open)."""
    from ctxledger._hook._events import HookInputError
    from ctxledger.io._bounded import BoundedInputError, read_bounded

    try:
        return read_bounded(stream, "the event")
    except BoundedInputError as exc:
        raise HookInputError(str(exc)) from None


def database_url(db: str | None, folder: str | None, environ: Mapping[str, str]) -> str:
    """``db``, else the default database of the project at ``folder``
    (``ctxledger._config.resolve_db_url``), with a relative SQLite path made absolute."""
    from ctxledger._config import resolve_db_url
    from ctxledger._hook._spool import absolute_url

    return absolute_url(resolve_db_url(db, folder=folder, environ=environ))


def run(raw: bytes, db: str | None, agent: str | None, *,
        environ: Mapping[str, str] | None = None,
        report: Callable[[str], None] = lambda line: None, worker: bool = False,
        drainer: bool = True) -> str | None:
    """What the hook does with the event ``raw`` for the database ``db`` (None: the
    project's default); returns what it prints on stdout, or None.

    A tool use is appended to the spool and a drainer started (nothing heavier than the
    standard library is imported); ``PreToolUse`` and ``Notification`` are taken and
    left; any other event opens the ledger, drains the spool first (so an injection sees
    every tool use; ``report`` gets a line per refused spool line), then acts. A bad
    event raises ``HookInputError`` before anything is written. With ``worker`` the
    database's warm worker drains and acts instead when one is listening, and the
    drainer started stays on as that worker when none is. Without ``drainer`` a tool
    use is left in the spool.
    """
    from ctxledger._hook._events import QUIET_EVENTS, TOOL_EVENTS, parse_event, tool_use
    from ctxledger._hook._spool import Spool, SpoolClock, append, start_drainer, tool_use_line
    from ctxledger._hook._worker import ask_drain, ask_event, worker_wanted
    from ctxledger._project import project_scope
    from ctxledger.store.clock import system_clock

    env = os.environ if environ is None else environ
    event = parse_event(raw)
    if event.name in QUIET_EVENTS:
        return None
    url = database_url(db, event.cwd, env)
    scope = project_scope(event.cwd, environ=env)
    spool = Spool.of(url, env)
    at = system_clock()
    if event.name in TOOL_EVENTS:
        tool_use(event)  # refuses a tool use without a tool name, before anything is written
        append(spool, tool_use_line(event, agent, at, env))
        if drainer and not (worker and ask_drain(url, env)):
            start_drainer(url, env, worker=worker and worker_wanted(url, env))
        return None
    if worker:
        answer = ask_event(url, raw, scope, agent, at, env)
        if answer is not None:
            from ctxledger._hook._worker import WorkerError

            for line in answer.lines:
                report(line)
            if answer.error is not None:
                raise WorkerError(answer.error)
            return answer.stdout
    from ctxledger._hook._handle import LedgerRunner
    from ctxledger._open import open_ledger

    # No vocabulary up front: a session start loads one only for a text whose count is
    # not cached yet.
    with open_ledger(url, load_vocabulary=False, clock=SpoolClock()) as ledger:
        found = LedgerRunner(ledger, spool).act(raw, scope, agent, None, report)
    if worker and drainer and worker_wanted(url, env):
        start_drainer(url, env, worker=True)
    return found


def start_drainer_for(url: str, environ: Mapping[str, str], stderr: TextIO) -> None:
    """Start the drainer of ``url``, staying on as its worker when none runs: what a tool
    use does when no worker took its drain request (``_fast``). A failure is the hook's
    one line on ``stderr``."""
    from ctxledger._warnings import one_line_warnings

    def report(line: str) -> None:
        print(f"ctxledger hook: {line}", file=stderr)
    try:
        with one_line_warnings(report):
            from ctxledger._hook._spool import start_drainer
            from ctxledger._hook._worker import worker_wanted

            start_drainer(url, environ, worker=worker_wanted(url, environ))
    except Exception as exc:  # fail open: the agent must go on
        from ctxledger._hook._handle import fail_open_message

        print(fail_open_message(exc), file=stderr)


def drain_spool(db: str | None, *, environ: Mapping[str, str] | None = None,
                report: Callable[[str], None] = lambda line: None,
                worker: bool = False) -> int:
    """``ctxledger hook --drain``: append the spooled tool uses of ``db`` (None: the
    default database) to its log; returns how many lines were taken. The ledger is
    opened only when there is a line (a drainer with nothing to do imports nothing
    heavy). With ``worker`` it then stays on as the database's worker until idle
    (``_worker.serve``; at once back when another worker runs)."""
    from ctxledger._hook._spool import Spool, SpoolClock, drain
    from ctxledger._hook._worker import serve

    env = os.environ if environ is None else environ
    url = database_url(db, None, env)
    clock = SpoolClock()
    opened: list[Ledger] = []

    def ledger() -> Ledger:
        if not opened:
            from ctxledger._open import open_ledger

            opened.append(open_ledger(url, load_vocabulary=False, clock=clock))
        return opened[0]
    try:
        taken = drain(Spool.of(url, env), ledger, clock, report)
    finally:
        for each in opened:
            each.close()
    if worker:
        serve(url, lambda: _warm_runner(url, env, report), env)
    return taken


def _warm_runner(url: str, environ: Mapping[str, str], report: Callable[[str], None]
                 ) -> LedgerRunner:
    """The worker's ledger, with the assembler loaded: its first session start must not
    wait for imports either."""
    from ctxledger._hook._handle import LedgerRunner
    from ctxledger._hook._spool import Spool, SpoolClock
    from ctxledger._open import open_ledger

    ledger = open_ledger(url, load_vocabulary=True, clock=SpoolClock())
    return LedgerRunner(ledger, Spool.of(url, environ), report)


def stop(db: str | None, *, environ: Mapping[str, str] | None = None) -> str:
    """``ctxledger hook --stop-worker``: ask the worker of ``db`` (None: the default
    database) to exit; the line saying whether one was running."""
    from ctxledger._hook._worker import stop_worker

    env = os.environ if environ is None else environ
    if stop_worker(database_url(db, None, env), env):
        return "stopped the hook's worker"
    return "no hook worker was running"


if TYPE_CHECKING:
    from ctxledger._hook._handle import LedgerRunner
