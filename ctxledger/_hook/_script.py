"""The ``ctxledger`` script's entry: a tool use spooled by ``_fast``, any other hook
event through ``_route.run_hook``, any other command through the Typer app.

Only ``_fast`` is imported up front (what a tool use runs); the rest on the way to
anything else.
"""

from __future__ import annotations

import os
import sys

from ctxledger._hook import _fast

TYPE_CHECKING = False  # typing is not imported at run time (mypy reads the name)
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from typing import IO


def main() -> None:
    """The ``ctxledger`` script: a hook command line here, anything else to Typer."""
    if not hook_main(sys.argv[1:]):
        from ctxledger.cli._app import main as typer_main

        typer_main()


def hook_main(argv: Sequence[str]) -> bool:
    """Run ``argv`` as a hook command line when it is one (True), else do nothing
    (False). A tool use is spooled here when it can be; everything else, and a tool use
    this route is not sure of, goes to ``run_hook`` with the bytes read so far."""
    environ = os.environ
    arguments = _fast.hook_argv(argv, environ)
    if arguments is None:
        return False
    stdin: IO[bytes] = sys.stdin.buffer
    if not (arguments[2] or arguments[4]):
        data = _fast.read_event(stdin, environ)
        if data is not None:
            if spool_tool_use(data, arguments[0], arguments[1], environ):
                return True
            import io

            stdin = io.BytesIO(data)
    from ctxledger._hook._route import HookArguments, run_hook

    run_hook(HookArguments(*arguments), stdin, sys.stdout, sys.stderr, worker=True)
    return True


def spool_tool_use(data: bytes, db: str | None, agent: str | None,
                   environ: Mapping[str, str]) -> bool:
    """Spool the tool use in ``data`` and have it drained (the worker told, else a
    drainer started); True when done here, False when nothing was done (the general
    route then takes the event: it is not a tool use, or not one this route is sure of).
    A failure after the line is written is reported as the general route reports it."""
    try:
        prepared = _fast.prepare(data, db, agent, environ)
        if prepared is None:
            return False
        folder, url, key, line = prepared
        _fast.append_line(os.path.join(folder, "spool"), key, line)
    except Exception:  # the general route does it again, and reports what fails
        return False
    try:
        if not _fast.ask_drain(os.path.join(folder, "worker"), key, environ):
            from ctxledger._hook._route import start_drainer_for

            start_drainer_for(url, environ, sys.stderr)
    except Exception as exc:  # fail open: the agent must go on
        from ctxledger._hook._handle import fail_open_message

        print(fail_open_message(exc), file=sys.stderr)
    return True
