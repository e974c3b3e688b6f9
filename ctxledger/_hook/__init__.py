"""Claude Code's hooks (``ctxledger hook``), in one package.

Claude Code runs the hook command once per event, the event as JSON on stdin. Every
route reaches ``run_hook`` (``_route``): the console script's fast route around Typer
(``_script.hook_main``) and the Typer command (``ctxledger.cli._hook``). The modules:

- ``_script``: the console script's entry (``main``): a tool use through ``_fast``,
  another hook event through ``run_hook``, another command through Typer;
- ``_fast``: the command line the script reads, and a tool use's route: the event
  checked, its bytes appended to the spool, the worker told to drain (no module that
  is slow to import);
- ``_route``: ``run_hook`` and ``run`` (spool a tool use, else ask the warm worker, else
  act in this process), for every event ``_fast`` does not finish;
- ``_events``: what an event is (parsing, ids, a tool use's ``tool.used``); standard
  library only, as a tool use imports it;
- ``_spool``: how a tool use reaches the log (a file, then a drainer);
- ``_worker``: the warm process per database that answers the other events;
- ``_handle``: what each event does to the ledger (``LedgerRunner``);
- ``_transcript``: Claude Code's transcript file, read from where the last read stopped,
  as chat messages, and the summary a session ends with.

The console script's first stop is ``_script`` and ``_fast`` (a tool use's whole
route, on the modules Python loads at start-up), so this file imports nothing: its names
come from ``_route`` on first use.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing is not imported at run time (mypy reads the name)
if TYPE_CHECKING:
    from ctxledger._hook._route import HookArguments, hook_arguments, run_hook
else:
    def __getattr__(name: str) -> object:
        if name in __all__:
            from ctxledger._hook import _route

            return getattr(_route, name)
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

__all__ = ["HookArguments", "hook_arguments", "run_hook"]
