"""Claude Code's hooks (``ctxledger hook``), in one package.

Claude Code runs the hook command once per event, the event as JSON on stdin. Every
route reaches ``run_hook`` (``_route``): the console script's fast route around Typer
(``fast_main``) and the Typer command (``ctxledger.cli._hook``). The modules:

- ``_route``: the command line the fast route reads, ``run_hook`` and ``run`` (spool a
  tool use, else ask the warm worker, else act in this process);
- ``_events``: what an event is (parsing, ids, a tool use's ``tool.used``); standard
  library only, as a tool use imports it;
- ``_spool``: how a tool use reaches the log (a file, then a drainer);
- ``_worker``: the warm process per database that answers the other events;
- ``_handle``: what each event does to the ledger (``LedgerRunner``);
- ``_transcript``: Claude Code's transcript file, read from where the last read stopped,
  as chat messages, and the summary a session ends with.

This file imports only ``_route`` (the standard library): a tool use must stay a Python
start-up and a file append.
"""

from ctxledger._hook._route import HookArguments, fast_main, hook_arguments, run_hook

__all__ = ["HookArguments", "fast_main", "hook_arguments", "run_hook"]
