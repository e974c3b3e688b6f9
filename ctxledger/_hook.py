"""Claude Code hook events, turned into ledger calls (``ctxledger hook``).

Claude Code runs a hook command with one event as JSON on stdin (``session_id``,
``transcript_path``, ``cwd``, ``hook_event_name`` and the event's own fields). This module
reads the event and says what it means for the ledger; every write goes through a
``Ledger`` method, one transaction per event:

- ``SessionStart``: start the session in the project's scope if new, and return the
  ``session`` profile's injection (with an agent: plus the state scoped by its manifest)
  as ``hookSpecificOutput.additionalContext``;
- ``SubagentStart``: the session state scoped by the spawned agent's manifest (its
  ``agent_type``, or the agent given), as ``additionalContext`` for the sub-agent;
- ``PostToolUse`` (and ``PostToolUseFailure``, ``ok: false``): ``tool.used``, its MCP
  server taken from ``mcp__<server>__<tool>``; a tool the scope has not seen yet is
  registered (``mcp_tool``, ``builtin`` for Claude Code's own PascalCase tools, else
  ``other``), as Laminark does, so that the next session start can rank it;
- ``UserPromptSubmit``: the prompt as a user message;
- ``Stop`` and ``SessionEnd``: ``session.ended``, with the event's ``summary`` (else a
  Stop's ``last_assistant_message``) when it has one.

Event ids are derived from the session and the tool call's id (``tool_use_id``), else
from a hash of the event, so a retried event is written once.

``run`` is what the command does: a tool use is only spooled (``ctxledger._spool``; this
module imports nothing but the standard library at the top, so that path stays fast), and
every other event drains the spool before it acts, in the database's warm worker
(``ctxledger._hook_worker``) when one answers, else in this process (``LedgerRunner``
is that code, for both).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Callable, Mapping
from datetime import datetime
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, NamedTuple

from ctxledger._hook_worker import (
    WorkerError,
    ask_drain,
    ask_event,
    serve,
    stop_worker,
    worker_wanted,
)
from ctxledger._ids import derived_event_id
from ctxledger._project import project_scope, user_db_url
from ctxledger._spool import Spool, SpoolClock, absolute_url, append, drain, start_drainer
from ctxledger._spool import tool_use_line as spool_line
from ctxledger.io._bounded import BoundedInputError, loads_bounded, read_bounded
from ctxledger.store.clock import system_clock
from ctxledger.store.errors import LedgerError

if TYPE_CHECKING:
    from ctxledger._ledger import Ledger

HANDLED = ("SessionStart", "SubagentStart", "PostToolUse", "PostToolUseFailure",
           "UserPromptSubmit", "Stop", "SessionEnd")
"""The hook events ``ctxledger hook`` acts on, in the order a session sends them."""
TOOL_EVENTS = ("PostToolUse", "PostToolUseFailure")
"""The events a hook spools (``ctxledger._spool``) rather than writes: one per tool call."""
AGENT_ENV = "CTXLEDGER_AGENT"
"""The agent whose manifest scopes the injection, when ``--agent`` is not given."""
CONTEXT_CAP = 10_000
"""Claude Code's cap on injected context, in characters."""
SESSION_PROFILE = "session"
FAIL_PREFIX = "ctxledger hook: "
"""What every line the hook prints on stderr starts with."""

# The SPEC's server pattern (the session profile's ``MCP_SERVER_PATTERN``), kept here too:
# a tool use must not import the assembler to read one regular expression.
_MCP_SERVER = re.compile(r"^mcp__([^_]+(?:_[^_]+)*)__")
_BUILTIN = re.compile(r"[A-Z][A-Za-z]+")


class HookInputError(LedgerError):
    """The hook's input is not one Claude Code event."""


class HookEvent(NamedTuple):
    """One Claude Code hook event: its name, session, project folder and whole payload."""

    name: str
    session: str
    cwd: str
    payload: Mapping[str, Any]


def parse_event(raw: bytes) -> HookEvent:
    """The event in ``raw`` (a JSON object with ``hook_event_name``, ``session_id`` and
    ``cwd``, nested within the input limit: ``ctxledger.io._bounded``); anything else
    raises ``HookInputError`` naming what is wrong."""
    try:
        # Numbers unchecked: a tool's response may hold any; the hook reads none of them.
        payload = loads_bounded(raw, "the event", check_numbers=False)
    except BoundedInputError as exc:
        raise HookInputError(str(exc)) from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise HookInputError(f"the event is not JSON: {exc}") from None
    if not isinstance(payload, dict):
        raise HookInputError("the event is not a JSON object")
    fields: dict[str, str] = {}
    for key in ("hook_event_name", "session_id", "cwd"):
        value = payload.get(key)
        if not isinstance(value, str) or not value.strip():
            raise HookInputError(f"the event has no {key}")
        fields[key] = value
    return HookEvent(fields["hook_event_name"], fields["session_id"], fields["cwd"], payload)


def mcp_server(tool_name: str) -> str | None:
    """The MCP server of ``mcp__<server>__<tool>`` (None for any other name)."""
    match = _MCP_SERVER.match(tool_name)
    return match.group(1) if match else None


def tool_registration(tool_name: str) -> dict[str, Any]:
    """The ``tool.registered`` data of a tool first seen in use: an MCP tool with its
    server, one of Claude Code's own tools (``Read``, ``Bash``: a PascalCase word) as a
    builtin, anything else as ``other``."""
    server = mcp_server(tool_name)
    if server is not None:
        return {"name": tool_name, "tool_type": "mcp_tool", "server_name": server}
    kind = "builtin" if _BUILTIN.fullmatch(tool_name) else "other"
    return {"name": tool_name, "tool_type": kind}


def event_key(event: HookEvent) -> str:
    """What tells this event from another of its session: its payload's hash, with the
    transcript's size (two identical prompts are two events; a retry is one)."""
    canonical = json.dumps(event.payload, sort_keys=True, ensure_ascii=False,
                           separators=(",", ":"))
    size = ""
    path = event.payload.get("transcript_path")
    if isinstance(path, str) and path:
        try:
            size = str(os.stat(path).st_size)
        except OSError:
            size = ""
    return hashlib.sha256(f"{canonical}\x1f{size}".encode("utf-8", "surrogatepass")
                          ).hexdigest()


def tool_use(event: HookEvent) -> tuple[dict[str, Any], dict[str, Any]]:
    """The ``tool.used`` event of a PostToolUse (or PostToolUseFailure), with its derived
    id, and the ``tool.registered`` data of its tool."""
    data = event.payload
    tool = data.get("tool_name")
    if not isinstance(tool, str) or not tool:
        raise HookInputError(f"{event.name} has no tool_name")
    call = data.get("tool_use_id")
    use: dict[str, Any] = {"tool_name": tool, "ok": _ok(event)}
    server = mcp_server(tool)
    if server is not None:
        use["server_name"] = server
    if isinstance(call, str) and call:
        use["call_id"] = call
    key = call if isinstance(call, str) and call else event_key(event)
    return ({"type": "tool.used", "data": use,
             "id": derived_event_id(event.session, "tool.used", key)},
            tool_registration(tool))


def run(raw: bytes, db: str | None, agent: str | None, *,
        environ: Mapping[str, str] | None = None,
        report: Callable[[str], None] = lambda line: None, worker: bool = False) -> str | None:
    """What ``ctxledger hook`` does with the event ``raw`` for the database ``db`` (None:
    ``user_db_url``); returns what it prints on stdout, or None.

    A tool use is appended to the spool and a drainer started (nothing heavier than the
    standard library is imported); any other event opens the ledger, drains the spool
    first (so an injection sees every tool use; ``report`` gets a line per refused spool
    line), then acts. A bad event raises ``HookInputError`` before anything is written.

    With ``worker`` (the console script) the database's warm worker
    (``ctxledger._hook_worker``) drains and acts instead when one is listening, and the
    drainer started stays on as that worker when none is.
    """
    env = os.environ if environ is None else environ
    event = parse_event(raw)
    if event.name not in HANDLED:
        raise HookInputError(f"unhandled hook event {event.name!r}"
                             f" (handled: {', '.join(HANDLED)})")
    url = absolute_url(db or user_db_url(env))
    scope = project_scope(event.cwd, environ=env)
    spool = Spool.of(url, env)
    at = system_clock()
    if event.name in TOOL_EVENTS:
        use, tool = tool_use(event)
        append(spool, spool_line(event.session, scope, agent, use, tool, at))
        if not (worker and ask_drain(url, env)):
            start_drainer(url, env, worker=worker and worker_wanted(url, env))
        return None
    if worker:
        answer = ask_event(url, raw, scope, agent, at, env)
        if answer is not None:
            for line in answer.lines:
                report(line)
            if answer.error is not None:
                raise WorkerError(answer.error)
            return answer.stdout
    from ctxledger._open import open_ledger

    # No vocabulary up front: a session start loads one only for a text whose count is
    # not cached yet.
    with open_ledger(url, load_vocabulary=False, clock=SpoolClock()) as ledger:
        found = LedgerRunner(ledger, spool).act(raw, scope, agent, None, report)
    if worker and worker_wanted(url, env):
        start_drainer(url, env, worker=True)
    return found


class LedgerRunner:
    """Hook events against an open ledger: what ``run`` does in-process, and what the
    worker does for each event it is sent."""

    def __init__(self, ledger: Ledger, spool: Spool,
                 report: Callable[[str], None] = lambda line: None) -> None:
        if not isinstance(ledger.clock, SpoolClock):
            raise TypeError("the hook's ledger runs on a SpoolClock")
        self.ledger = ledger
        self.clock = ledger.clock
        self.spool = spool
        self.report = report

    def act(self, raw: bytes, scope: str, agent: str | None, at: datetime | None,
            report: Callable[[str], None]) -> str | None:
        """Drain the spool, then act on the event ``raw`` at ``at`` (None: the clock's
        own time); returns what the hook prints, or None."""
        event = parse_event(raw)
        self.clock.base = at
        try:
            drain(self.spool, lambda: self.ledger, self.clock, report)
            found = handle(event, self.ledger, scope, agent)
        finally:
            self.clock.base = None
        return None if found is None else json.dumps(found, ensure_ascii=False)

    def failure(self, exc: Exception) -> str:
        """The hook's fail-open line for ``exc``, without its ``ctxledger hook:``."""
        return fail_open_message(exc).removeprefix(FAIL_PREFIX)

    def drain(self) -> None:
        """Append the spooled tool uses (refused lines go to ``report``)."""
        drain(self.spool, lambda: self.ledger, self.clock, self.report)

    def database_file(self) -> Path | None:
        """The ledger's database file (None for a server's database)."""
        from ctxledger.store.backends import backend_for

        return backend_for(self.ledger.engine).database_file(self.ledger.engine)

    def close(self) -> None:
        """Close the ledger."""
        self.ledger.close()


def drain_spool(db: str | None, *, environ: Mapping[str, str] | None = None,
                report: Callable[[str], None] = lambda line: None,
                worker: bool = False) -> int:
    """``ctxledger hook --drain``: append the spooled tool uses of ``db`` (None:
    ``user_db_url``) to its log; returns how many lines were taken. The ledger is opened
    only when there is a line (a drainer with nothing to do imports nothing heavy). With
    ``worker`` it then stays on as the database's worker until idle
    (``ctxledger._hook_worker.serve``; at once back when another worker runs)."""
    env = os.environ if environ is None else environ
    url = absolute_url(db or user_db_url(env))
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
    from ctxledger._open import open_ledger

    ledger = open_ledger(url, load_vocabulary=True, clock=SpoolClock())
    return LedgerRunner(ledger, Spool.of(url, environ), report)


def stop(db: str | None, *, environ: Mapping[str, str] | None = None) -> str:
    """``ctxledger hook --stop-worker``: ask the worker of ``db`` (None: ``user_db_url``)
    to exit; the line saying whether one was running."""
    env = os.environ if environ is None else environ
    url = absolute_url(db or user_db_url(env))
    if stop_worker(url, env):
        return "stopped the hook's worker"
    return "no hook worker was running"


def read_event(stream: IO[bytes]) -> bytes:
    """The hook's stdin, at most ``$CTXLEDGER_MAX_INPUT_BYTES`` (``ctxledger.io._bounded``);
    a larger event is a ``HookInputError`` (fail open)."""
    try:
        return read_bounded(stream, "the event")
    except BoundedInputError as exc:
        raise HookInputError(str(exc)) from None


def fail_open_message(exc: BaseException) -> str:
    """The one stderr line of a hook that failed (it exits 0 all the same)."""
    from ctxledger._open import explain, one_line

    message = explain(exc) or f"internal error: {type(exc).__name__}: {one_line(str(exc))}"
    return f"{FAIL_PREFIX}{message}"


def handle(event: HookEvent, ledger: Ledger, scope: str, agent: str | None = None
           ) -> dict[str, Any] | None:
    """Act on ``event`` in ``ledger`` (the project's ``scope``); return what the hook
    prints on stdout (SessionStart and SubagentStart print), or None. An event it does not
    handle raises ``HookInputError``, writing nothing."""
    session, data = event.session, event.payload
    if event.name == "SessionStart":
        ledger.record_in_session(session, scope, agent=agent)
        return {"hookSpecificOutput": {"hookEventName": "SessionStart",
                                       "additionalContext": session_context(
                                           ledger, session, agent)}}
    if event.name == "SubagentStart":
        spawned = agent or data.get("agent_type")
        if not isinstance(spawned, str) or not spawned.strip():
            raise HookInputError("SubagentStart has no agent_type (and no --agent was given)")
        ledger.record_in_session(session, scope)
        return {"hookSpecificOutput": {"hookEventName": "SubagentStart",
                                       "additionalContext": agent_state(ledger, session,
                                                                        spawned)}}
    if event.name in TOOL_EVENTS:
        use, tool = tool_use(event)
        ledger.record_in_session(session, scope, [use], tools=[tool], agent=agent)
        return None
    if event.name == "UserPromptSubmit":
        prompt = data.get("prompt")
        if not isinstance(prompt, str):
            raise HookInputError("UserPromptSubmit has no prompt")
        ledger.record_in_session(
            session, scope, [{"type": "message.appended",
                              "data": {"role": "user", "content": prompt},
                              "id": derived_event_id(session, "prompt", event_key(event))}],
            agent=agent)
        return None
    if event.name in ("Stop", "SessionEnd"):
        ledger.end_session(session, scope, _summary(event),
                           event_id=derived_event_id(session, "session.ended",
                                                     event_key(event)))
        return None
    raise HookInputError(f"unhandled hook event {event.name!r} (handled: {', '.join(HANDLED)})")


def session_context(ledger: Ledger, session: str, agent: str | None) -> str:
    """The ``session`` profile's injection for ``session``; with ``agent``, followed by
    the session state scoped by that agent's manifest (``_agent``, ``_savings``), or a
    line saying why not when it would pass Claude Code's cap."""
    text = ledger.assemble(session, SESSION_PROFILE).text
    if agent is None:
        return text
    return text + "\n\n" + agent_state(ledger, session, agent,
                                         room=CONTEXT_CAP - len(text) - 2)


def agent_state(ledger: Ledger, session: str, agent: str, room: int = CONTEXT_CAP) -> str:
    """``[ctxledger - Agent state: A]`` and the session state scoped by agent type A's
    manifest (``ledger.state(agent=...)``, compact JSON); a line saying how to read it
    instead when it would take more than ``room`` characters."""
    state = json.dumps(ledger.state(session, agent=agent), sort_keys=True,
                       ensure_ascii=False, separators=(",", ":"))
    block = f"[ctxledger - Agent state: {agent}]\n{state}"
    if len(block) > room:
        block = (f"[ctxledger - Agent state: {agent}] not shown: {len(state)} characters"
                 f" would pass the {CONTEXT_CAP}-character cap; run"
                 f" 'ctxledger state {session} --agent {agent}'")
    return block


def _ok(event: HookEvent) -> bool:
    """False for a failed tool call: PostToolUseFailure, or a response that says so."""
    if event.name == "PostToolUseFailure":
        return False
    response = event.payload.get("tool_response")
    return not (isinstance(response, Mapping)
                and (response.get("is_error") is True or response.get("success") is False))


def _summary(event: HookEvent) -> str | None:
    for key in ("summary", "last_assistant_message"):
        value = event.payload.get(key)
        if isinstance(value, str) and value.strip():
            return value
    return None
