"""What each Claude Code hook event does to the ledger; every write goes through a
``Ledger`` method, one transaction per write:

- ``SessionStart``: first, any other session of the project's scope still open (no
  ``SessionEnd`` came: Claude Code was killed) is ended with its summary. Then the
  session starts if new (``startup``; ``clear`` comes with a new session id) or goes on
  (``resume``, ``compact``: the same id), its transcript is read, and the ``session``
  profile's injection is printed (with an agent: plus the state scoped by its manifest).
  A session in a scope with history is never greeted as the first;
- ``SubagentStart``: the session state scoped by the spawned agent's manifest;
- ``UserPromptSubmit``: the transcript so far, then the prompt as a user message (unless
  the transcript holds it already);
- ``Stop`` (after every reply), ``SubagentStop``, ``PreCompact``: the transcript's new
  lines as messages (the turn). With no readable transcript, a ``Stop``'s
  ``last_assistant_message`` is the reply;
- ``PostToolUse``, ``PostToolUseFailure``: ``tool.used`` (spooled; ``_spool``);
- ``SessionEnd``: the transcript's new lines, then ``session.ended`` with the summary
  derived from the session's recorded messages (``_transcript.session_summary``).

A transcript that is missing or unreadable fails open: one line on stderr, the event
done without it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ctxledger._hook._events import (
    FAIL_PREFIX,
    TOOL_EVENTS,
    HookEvent,
    HookInputError,
    event_key,
    parse_event,
    tool_use,
)
from ctxledger._hook._spool import Spool, SpoolClock, drain
from ctxledger._hook._transcript import (
    PROMPT_METADATA,
    TranscriptMark,
    hook_prompt,
    message_events,
    read_transcript,
    session_summary,
)
from ctxledger._ids import derived_event_id

if TYPE_CHECKING:
    from ctxledger._ledger import Ledger
    from ctxledger.store.records import RecordedEvent

CONTEXT_CAP = 10_000
"""Claude Code's cap on injected context, in characters."""
SESSION_PROFILE = "session"
GOING_ON = ("resume", "compact")
"""``SessionStart`` sources that go on with a session rather than start one."""
RETURNING = ("[ctxledger] No earlier session of this project has a summary yet; what"
             " this project's sessions did is in the ledger ('ctxledger state SESSION').")
"""The greeting of a session in a scope with history but no summary to show."""
CONTINUING = ("[ctxledger] This session goes on ({source}); no other session of this"
              " project has ended with a summary yet.")
"""The greeting of a resumed or compacted session with no other summary to show."""

Report = Callable[[str], None]


class LedgerRunner:
    """Hook events against an open ledger: what the hook does in-process, and what the
    worker does for each event it is sent."""

    def __init__(self, ledger: Ledger, spool: Spool, report: Report = lambda line: None
                 ) -> None:
        if not isinstance(ledger.clock, SpoolClock):
            raise TypeError("the hook's ledger runs on a SpoolClock")
        self.ledger = ledger
        self.clock = ledger.clock
        self.spool = spool
        self.report = report

    def act(self, raw: bytes, scope: str, agent: str | None, at: datetime | None,
            report: Report) -> str | None:
        """Drain the spool, then act on the event ``raw`` at ``at`` (None: the clock's
        own time); returns what the hook prints, or None."""
        event = parse_event(raw)
        self.clock.base = at
        try:
            drain(self.spool, lambda: self.ledger, self.clock, report)
            found = handle(event, self.ledger, scope, agent, report)
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


def fail_open_message(exc: BaseException) -> str:
    """The one stderr line of a hook that failed (it exits 0 all the same)."""
    from ctxledger._open import explain, one_line

    message = explain(exc) or f"internal error: {type(exc).__name__}: {one_line(str(exc))}"
    return f"{FAIL_PREFIX}{message}"


def handle(event: HookEvent, ledger: Ledger, scope: str, agent: str | None = None,
           report: Report = lambda line: None) -> dict[str, Any] | None:
    """Act on ``event`` in ``ledger`` (the project's ``scope``); return what the hook
    prints on stdout (SessionStart and SubagentStart print), or None. A bad event raises
    ``HookInputError``, writing nothing; ``report`` gets the lines for stderr."""
    session, name = event.session, event.name
    if name == "SessionStart":
        source = event.text("source") or "startup"
        end_open_sessions(ledger, scope, session, event.cwd, report)
        had_history = _has_history(ledger, scope, session)
        ledger.record_in_session(session, scope, agent=agent)
        record_transcript(ledger, event, scope, report)
        return {"hookSpecificOutput": {"hookEventName": "SessionStart",
                                       "additionalContext": session_context(
                                           ledger, session, agent,
                                           _greeting(source, had_history))}}
    if name == "SubagentStart":
        spawned = agent or event.text("agent_type")
        if spawned is None:
            raise HookInputError("SubagentStart has no agent_type (and no --agent was given)")
        ledger.record_in_session(session, scope)
        return {"hookSpecificOutput": {"hookEventName": "SubagentStart",
                                       "additionalContext": agent_state(ledger, session,
                                                                        spawned)}}
    if name in TOOL_EVENTS:
        use, tool = tool_use(event)
        ledger.record_in_session(session, scope, [use], tools=[tool], agent=agent)
        return None
    if name == "UserPromptSubmit":
        prompt = event.payload.get("prompt")
        if not isinstance(prompt, str):
            raise HookInputError("UserPromptSubmit has no prompt")
        record_transcript(ledger, event, scope, report)
        if not _newest_prompt_is(ledger, session, prompt):
            ledger.record_in_session(session, scope, [{
                "type": "message.appended", "data": {"role": "user", "content": prompt},
                "metadata": PROMPT_METADATA,
                "id": derived_event_id(session, "prompt", event_key(event))}], agent=agent)
        return None
    if name in ("Stop", "SubagentStop", "PreCompact"):
        read = record_transcript(ledger, event, scope, report)
        reply = event.text("last_assistant_message")
        if name == "Stop" and not read and reply is not None:
            ledger.record_in_session(session, scope, [{
                "type": "message.appended",
                "data": {"role": "assistant", "content": reply},
                "id": derived_event_id(session, "reply", event_key(event))}], agent=agent)
        else:
            ledger.record_in_session(session, scope, agent=agent)
        return None
    if name == "SessionEnd":
        record_transcript(ledger, event, scope, report)
        # Ended already and nothing since (a retry, or a later start ended it): no end.
        for _, position in open_sessions(ledger, scope, only=session):
            end(ledger, session, scope, event.cwd,
                derived_event_id(session, "session.ended", str(position)))
        return None
    return None  # PreToolUse, Notification: nothing to record


# -- the transcript -----------------------------------------------------------------------


def record_transcript(ledger: Ledger, event: HookEvent, scope: str, report: Report) -> bool:
    """Record the messages of the lines of the event's transcript not read yet; False
    when it has none or it cannot be read (said on one ``report`` line, except for a
    file not made yet at a session start or a first prompt: Claude Code writes it with
    the session's first message)."""
    path = event.text("transcript_path")
    if path is None:
        return False
    early = event.name in ("SessionStart", "UserPromptSubmit")
    return catch_up(ledger, event.session, scope, path, report, quiet_missing=early)


def catch_up(ledger: Ledger, session: str, scope: str, path: str, report: Report, *,
             quiet_missing: bool = False) -> bool:
    """Record the messages of ``path`` (``session``'s transcript) after the mark the
    last read left; False when the file cannot be read (one ``report`` line; none for a
    missing file with ``quiet_missing``)."""
    recent = _recent_messages(ledger, session)
    mark, pending = _mark_and_pending(recent)
    try:
        read = read_transcript(path, mark)
    except OSError as exc:
        if not (quiet_missing and isinstance(exc, FileNotFoundError)):
            report(f"transcript {path}: {exc.strerror or exc}; the event is recorded"
                   " without it")
        return False
    for note in read.notes:
        report(note)

    def skip(prompt: str) -> bool:
        if pending and pending[0] == prompt:
            pending.pop(0)
            return True
        return False
    def stored(ids: list[str]) -> set[str]:
        from ctxledger.store.read import stored_event_ids

        with ledger.log.connection() as conn:
            return stored_event_ids(conn, ids)
    events = message_events(session, read, skip, stored)
    if events:
        ledger.record_in_session(session, scope, events)
    return True


def _recent_messages(ledger: Ledger, session: str) -> list[RecordedEvent]:
    """The session's messages back to the newest one the transcript gave (all of them
    when none did), oldest first."""
    for last in (64, None):
        found = ledger.messages(session, last=last)
        if last is None or len(found) < last or any(
                TranscriptMark.of(each.metadata) is not None for each in found):
            return found
    return []  # unreachable: the second pass returns


def _mark_and_pending(recent: list[RecordedEvent]) -> tuple[TranscriptMark | None, list[str]]:
    """The newest transcript mark, and the prompts recorded from their hook events after
    it (the transcript has them to come: they are not recorded twice)."""
    pending: list[str] = []
    for each in reversed(recent):
        mark = TranscriptMark.of(each.metadata)
        if mark is not None:
            return mark, pending
        if hook_prompt(each.metadata) and isinstance(each.data.get("content"), str):
            pending.insert(0, str(each.data["content"]))
    return None, pending


def _newest_prompt_is(ledger: Ledger, session: str, prompt: str) -> bool:
    """The session's newest user message is ``prompt``, read from the transcript (not
    recorded from an earlier hook event)."""
    for each in reversed(ledger.messages(session, last=16)):
        if each.data.get("role") == "user":
            return each.data.get("content") == prompt and not hook_prompt(each.metadata)
    return False


# -- ends ---------------------------------------------------------------------------------


def end(ledger: Ledger, session: str, scope: str, cwd: str | None, event_id: str) -> None:
    """End ``session`` with the summary its recorded messages give (within the budget
    of its ``session`` profile); with none, the summary it last ended with stays."""
    policy = ledger.policy(session, SESSION_PROFILE)
    budget = max(200, int(getattr(policy, "max_chars", 6000))
                 - int(getattr(policy, "tool_section_budget", 500)) - 100)
    summary = session_summary((each.data for each in ledger.messages(session)), budget, cwd)
    ledger.end_session(session, scope, summary, event_id=event_id)


def end_open_sessions(ledger: Ledger, scope: str, starting: str, cwd: str,
                      report: Report) -> None:
    """End every session of ``scope`` but ``starting`` that is open (never ended, or
    written to since it last ended), after reading the rest of its transcript."""
    for session, _ in open_sessions(ledger, scope, besides=starting):
        mark, _ = _mark_and_pending(_recent_messages(ledger, session))
        if mark is not None:
            catch_up(ledger, session, scope, mark.path, report)
        # The end's id: the session's last event before it (read after the catch-up).
        for _, position in open_sessions(ledger, scope, only=session):
            end(ledger, session, scope, cwd,
                derived_event_id(session, "session.ended", str(position)))


def open_sessions(ledger: Ledger, scope: str, *, besides: str | None = None,
                  only: str | None = None) -> list[tuple[str, int]]:
    """The open sessions of ``scope`` (never ended, or written to since they last
    ended), each with the position of its last event, oldest first: all but
    ``besides``, or ``only`` that one."""
    import sqlalchemy as sa

    from ctxledger.projections.session_stats import sessions

    query = (sa.select(sessions.c.stream_id, sessions.c.last_position)
             .where(sessions.c.scope == scope,
                    sa.or_(sessions.c.ended_position.is_(None),
                           sessions.c.last_position > sessions.c.ended_position))
             .order_by(sessions.c.last_position, sessions.c.stream_id))
    if besides is not None:
        query = query.where(sessions.c.stream_id != besides)
    if only is not None:
        query = query.where(sessions.c.stream_id == only)
    with ledger.log.connection() as conn:
        rows = conn.execute(query).all()
    return [(str(row[0]), int(row[1])) for row in rows]


def _has_history(ledger: Ledger, scope: str, session: str) -> bool:
    """The scope holds another session, or this one holds more than its start (a
    retried start is still a first session's)."""
    if any(each.session != session for each in ledger.sessions(scope)):
        return True
    found, _ = ledger.events_page(session, limit=2, max_bytes=1 << 30, size=lambda _: 1)
    return len(found) > 1


# -- what is printed ----------------------------------------------------------------------


def _greeting(source: str, had_history: bool) -> str | None:
    """The greeting when there is nothing to show (None: the profile's own, for a
    project's first session)."""
    if source in GOING_ON:
        return CONTINUING.format(source=source)
    return RETURNING if had_history else None


def session_context(ledger: Ledger, session: str, agent: str | None,
                    greeting: str | None = None) -> str:
    """The session's injection (its profile setting, else the ``session`` profile), with
    ``greeting`` in place of the first session's welcome when given; with ``agent``, the
    core's agent context (``Ledger.context``) capped at Claude Code's limit."""
    profile = ledger.profile_of(session, None, default=SESSION_PROFILE).name
    policy = None
    if greeting is not None and profile == SESSION_PROFILE:  # only that profile greets
        policy = ledger.policy(session, profile).model_copy(
            update={"welcome_message": greeting})
    return ledger.context(session, profile, agent=agent, policy=policy).text(
        limit=CONTEXT_CAP)


def agent_state(ledger: Ledger, session: str, agent: str) -> str:
    """The state block of agent type ``agent`` (``_agent_context.state_block``): what a
    subagent is told, within Claude Code's cap."""
    from ctxledger._agent_context import state_block

    return state_block(session, agent, ledger.state(session, agent=agent), room=CONTEXT_CAP)
