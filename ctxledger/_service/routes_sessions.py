"""Sessions: state, context assembly, a chat turn, replay, why, audit and fork."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import closing
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Query
from fastapi.responses import Response
from pydantic import WithJsonSchema
from starlette.concurrency import run_in_threadpool

from ctxledger._agent_context import AgentContext
from ctxledger._cancel import CancelToken
from ctxledger._ledger import Ledger
from ctxledger._service.auth import (
    KeyCheck,
    KeyCheckDep,
    KeyDep,
    LedgerDep,
    checked_write,
    require_writer,
    session_scope,
)
from ctxledger._service.context import context_data, context_response
from ctxledger._service.limits import Slots, cancel_of, slots_of
from ctxledger._service.models import (
    AgentAssemblyOut,
    AppendOut,
    AssembleBody,
    ChatRequestOut,
    ContextFormat,
    ForkBody,
    ForkOut,
    TurnBody,
    TurnOut,
    UsageBody,
)
from ctxledger._service.problems import Problem
from ctxledger._service.replica import ReadLedgerDep
from ctxledger._service.streaming import NDJSON, RecordStream, Shape
from ctxledger._times import parse_optional_time, parse_until
from ctxledger.assembler import Assembly

router = APIRouter(prefix="/sessions/{session}", tags=["sessions"])

Profile = Annotated[str | None, Query(
    description="The profile; default: the session's 'profile' setting, else card.")]
# Strings read by the core's time parser: a zone and the stored range are required, and
# a bare number is not a time (pydantic would read it as seconds since 1970).
_NOW = "ISO-8601 time with a zone; default: the server's clock."
Now = Annotated[str | None, WithJsonSchema({
    "anyOf": [{"type": "string", "format": "date-time"}, {"type": "null"}],
    "description": _NOW}), Query(description=_NOW)]
Format = Annotated[ContextFormat, Query(description="The response's shape.")]
Until = Annotated[str | None, Query(
    description="A log position (digits) or an ISO-8601 time; default: the head.")]
CancelDep = Annotated[CancelToken, Depends(cancel_of)]
SlotsDep = Annotated[Slots, Depends(slots_of)]
_ASSEMBLY: dict[int | str, dict[str, Any]] = {200: {
    "model": Assembly | AgentAssemblyOut | ChatRequestOut,
    "description": "The Assembly (json; with an agent, plus its scoped state), its text"
                   " (text/plain), or the chat request shape (openai, anthropic).",
    "content": {"text/plain": {}}}}


@router.get("/state")
def state(session: str, ledger: LedgerDep, key: KeyDep,
          agent: Annotated[str | None, Query(description="Scope to this agent's manifest.")]
          = None) -> dict[str, Any]:
    """The session's projection state (counts, chapter, settings, top tools...)."""
    session_scope(ledger, key, session)
    return ledger.state(session, agent=agent)


Agent = Annotated[str | None, Query(
    description="Add the session's state scoped by this agent's manifest: json gains"
                " 'agent' {name, state, text}, text ends with the state block; the openai"
                " and anthropic formats refuse it.")]
RECORDED_HEADER = "Recorded-Position"
"""The log position of the ``context.assembled`` an ``/assemble?record=true`` wrote."""
Record = Annotated[bool, Query(
    description="Also append the assembly as context.assembled (with its policy), so"
                " audit derives it again; needs a key that may write.")]
_RECORDED: dict[str, Any] = {"headers": {RECORDED_HEADER: {
    "description": "With record=true: the position of the context.assembled written.",
    "schema": {"type": "integer"}}}}


def _assemble(session: str, ledger: Ledger, check: KeyCheck, profile: str | None,
              now: str | None, fmt: ContextFormat, policy: dict[str, Any] | None,
              agent: str | None, record: bool) -> Response:
    # A sync route: the key is checked in its worker thread, before anything else.
    key = check.key()
    when = parse_optional_time(now, "now")
    session_scope(ledger, key, session)
    if record:
        require_writer(key)
    context = ledger.context(session, profile, agent=agent, now=when, policy=policy)
    response = context_response(context, fmt)
    if record:
        written = ledger.record_assembly(session, context.assembly, policy)
        response.headers[RECORDED_HEADER] = str(written.positions[-1])
    return response


@router.get("/assemble", responses={200: {**_ASSEMBLY[200], **_RECORDED}})
def assemble(session: str, ledger: LedgerDep, check: KeyCheckDep, profile: Profile = None,
             now: Now = None, format: Format = ContextFormat.json,
             agent: Agent = None, record: Record = False) -> Response:
    """The session's context built with a profile, in the asked format; with
    ``record=true`` it is recorded too (the ``Recorded-Position`` header says where)."""
    return _assemble(session, ledger, check, profile, now, format, None, agent, record)


@router.post("/assemble", responses={200: {**_ASSEMBLY[200], **_RECORDED}})
def assemble_with_policy(session: str, ledger: LedgerDep, check: KeyCheckDep,
                         body: AssembleBody | None = None, profile: Profile = None,
                         now: Now = None, format: Format = ContextFormat.json,
                         agent: Agent = None, record: Record = False) -> Response:
    """As ``GET``, with a ``policy`` in the body replacing the one the settings give (a
    recorded assembly stores that policy, so audit derives it with the same one)."""
    return _assemble(session, ledger, check, profile, now, format,
                     body.policy if body is not None else None, agent, record)


@router.post("/turn", response_model=TurnOut)
async def turn(session: str, body: TurnBody, ledger: LedgerDep,
               check: KeyCheckDep) -> TurnOut:
    """Append chat messages, then assemble the context after them (one round trip) and,
    unless ``record`` is false, record that assembly (``context.assembled``), so what a
    chat app sent can be audited."""
    # The turn runs in one worker thread and its result is checked on the event loop (a
    # sync route with a response model costs a second hop, only to validate it).
    def run() -> TurnOut:
        key = check.key()
        require_writer(key)
        # Messages open no scope: a new session is in scope default.
        result = checked_write(
            ledger, key, session, [], body.expected_version,
            lambda expected: ledger.append_messages(session, body.messages,
                                                    system=body.system,
                                                    expected_version=expected))
        context = ledger.context(session, body.profile)
        recorded = (AppendOut.of(ledger.record_assembly(session, context.assembly))
                    if body.record else None)
        return TurnOut(append=AppendOut.of(result), format=body.format,
                       context=context_data(context, body.format), recorded=recorded)

    return await run_in_threadpool(run)


_TIMELINE: dict[int | str, dict[str, Any]] = {200: {
    "description": "The Assembly; or, with ``timeline``, one record per step (as"
                   " ``ctxledger replay --timeline`` prints), streamed as they are computed:"
                   " a JSON array, or NDJSON lines when ``Accept`` names"
                   " application/x-ndjson. A stream cut short (its time limit, say) ends"
                   " with an ``{\"error\": <problem>}`` line (a JSON array is left"
                   " unclosed).",
    "content": {"application/json": {}, NDJSON: {}}}}


@router.get("/replay", responses=_TIMELINE)
def replay(session: str, ledger: ReadLedgerDep, key: KeyDep, cancel: CancelDep,
           slots: SlotsDep, until: Until = None, profile: Profile = None,
           timeline: Annotated[bool, Query(
               description="The assembly after each message instead.")] = False,
           accept: Annotated[str | None, Header(include_in_schema=False)] = None
           ) -> Response:
    """The assembly derived again from the log up to ``until`` (or its timeline, streamed
    step by step). An expensive request: a 429 beyond the key's limit at once."""
    session_scope(ledger, key, session)
    chosen = ledger.profile_of(session, profile).name
    cut = parse_until(until, "until")
    if not timeline:
        with slots.hold(key.key_id):
            replayed = ledger.replay(session, cut, profile=chosen)
            return context_response(AgentContext(session, replayed), ContextFormat.json)
    return _timeline(ledger, key.key_id, session, chosen, cut, cancel, slots,
                     "ndjson" if NDJSON in (accept or "") else "array")


def _timeline(ledger: Ledger, holder: str, session: str, profile: str,
              cut: int | datetime | None, cancel: CancelToken, slots: Slots,
              shape: Shape) -> Response:
    """The timeline's records, streamed; bad input is a 4xx before the stream starts."""
    from ctxledger.render._replay import timeline_records

    ledger.timeline_length(session, profile=profile, until=cut)
    slots.take(holder)

    def records() -> Iterator[dict[str, object]]:
        with closing(ledger.iter_timeline(session, profile=profile, until=cut,
                                          cancel=cancel)) as steps:
            yield from timeline_records(steps)

    return RecordStream(records, cancel, shape=shape,
                        done=lambda: slots.give(holder)).response()


@router.get("/why")
def why(session: str, ledger: ReadLedgerDep, key: KeyDep, cancel: CancelDep, slots: SlotsDep,
        item: Annotated[str, Query(description="The item, e.g. message:<id>.")],
        until: Until = None, profile: Profile = None) -> dict[str, Any]:
    """Why ``item`` was kept or dropped, across the session's timeline (read step by
    step; it stops at the time limit or when the client goes away). A key running its
    limit of expensive requests at once gets a 429 with ``Retry-After``."""
    session_scope(ledger, key, session)
    chosen = ledger.profile_of(session, profile).name
    with slots.hold(key.key_id):
        return ledger.why(session, item, profile=chosen, until=parse_until(until, "until"),
                          cancel=cancel).to_json()


@router.get("/audit")
def audit(session: str, ledger: ReadLedgerDep, key: KeyDep, cancel: CancelDep,
          slots: SlotsDep) -> dict[str, Any]:
    """Derive the session's recorded assemblies again; say whether each still matches
    (an expensive request: a 429 beyond the key's limit at once)."""
    session_scope(ledger, key, session)
    with slots.hold(key.key_id):
        return ledger.audit(session, cancel=cancel).to_json()


@router.post("/usage", response_model=AppendOut)
def report_usage(session: str, body: UsageBody, ledger: LedgerDep, key: KeyDep) -> AppendOut:
    """Record what the provider billed for one call (a ``usage.reported`` event); an
    assembly the session did not record is a 404."""
    from ctxledger._billing import UnknownAssembly

    require_writer(key)
    session_scope(ledger, key, session)
    if body.digest is not None and body.position is not None:
        raise Problem(400, "give digest or position, not both")
    try:
        result = ledger.report_usage(
            session, model=body.model, input_tokens=body.input_tokens,
            output_tokens=body.output_tokens, cached_tokens=body.cached_tokens,
            cost=body.cost, event_id=body.id,
            assembly=body.digest if body.digest is not None else body.position)
    except UnknownAssembly as exc:
        raise Problem(404, str(exc)) from None
    return AppendOut.of(result)


@router.post("/fork", response_model=ForkOut)
def fork(session: str, body: ForkBody, ledger: LedgerDep, key: KeyDep) -> ForkOut:
    """Copy the session up to position ``at`` into a new session (same scope)."""
    require_writer(key)
    session_scope(ledger, key, session)
    result = ledger.fork(session, body.new_session, body.at, count=body.count)
    return ForkOut(**AppendOut.of(result).model_dump(), forked_from=session)
