"""Replay: a past assembly derived again from a prefix of the log (SPEC §4).

A replay folds the prefix's events into a *scratch* store (an in-memory SQLite copy of
the schema, ``ctxledger._scratch``) with the same reducers, then loads the same read view
from it and assembles. Live projection tables are never read or written; only the event
log (through the ``(stream_id, stream_version)`` index) and the token-count cache (keyed
by content hash, so any count in it is right) are read.

Only the streams the profile needs are read, each cut at the position, and merged by
position: the session and ``scope:<S>``; for the ``session`` profile also every session
that joined the scope by then (the ``scope_members`` projection). The cost is the events
of those streams, not the length of the log.

A *timeline* folds once and assembles after each event that changes the profile's inputs
(``Profile.inputs``: messages for ``card``, items and chapter moves for ``novel``,
knowledge and messages for ``brief``, tool uses in the scope for ``session``, setting
changes for all), so ``m`` steps cost O(n + m·A), not ``m`` replays.
"""

from __future__ import annotations

import bisect
import functools
import heapq
import logging
from collections.abc import Generator, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa

from ctxledger._cancel import Cancelled, CancelToken, check
from ctxledger._message_index import MessageIndex, message_id_of
from ctxledger._scratch import scratch_engine
from ctxledger._token_store import TableTokenStore
from ctxledger.assembler.api import assemble_with_caches, policy_for, request_for
from ctxledger.assembler.inputs import SETTING_EVENTS, Inputs, Where
from ctxledger.assembler.memo import SessionMemos
from ctxledger.assembler.model import Assembly
from ctxledger.assembler.policy import Policy
from ctxledger.assembler.profiles import get_profile
from ctxledger.assembler.tokens import TokenCounter, counter_key
from ctxledger.projections.checkpoints import checkpoints
from ctxledger.projections.registry import builtin_projections
from ctxledger.projections.rowstore import RowStore
from ctxledger.projections.runner import Progress, ProjectionRunner
from ctxledger.projections.scope_members import members_until
from ctxledger.projections.session_view import SessionView, ViewRequest
from ctxledger.projections.view_loader import load_session_view
from ctxledger.store.canonical import canonical_json
from ctxledger.store.clock import ensure_utc
from ctxledger.store.errors import LedgerError
from ctxledger.store.hash_chain import ERASED_TYPE
from ctxledger.store.read import head_position, position_at, read_stream_until, recorded_at_until
from ctxledger.store.records import RecordedEvent
from ctxledger.store.schema import events as log_events
from ctxledger.store.streams import DEFAULT_SCOPE, SCOPE_PREFIX

_EPOCH = datetime(2000, 1, 1, tzinfo=UTC)
_log = logging.getLogger("ctxledger.timetravel")


@functools.cache
def scope_wide(profile: str) -> bool:
    """True when ``profile``'s read view holds state that the scope's other sessions
    write (``ViewRequest.reads_other_sessions``), so its replays also read
    those sessions' streams. Asked of the profile's own request under its default policy,
    so a profile registered later is served without a list to keep up to date."""
    found = get_profile(profile)
    # chars4: measuring needs no vocabulary, and the request's sections do not depend on it.
    request = found.request(found.policy_type.defaults(), _EPOCH, TokenCounter("chars4"))
    return request.reads_other_sessions()

class ReplayError(LedgerError):
    """A replay cannot be made: unknown session, a cut beyond the log, a naive time..."""


class ErasedHistory(ReplayError):
    """The events a replay needs were erased (``Ledger.erase``): what was assembled from
    them cannot be derived again, and a replay without them would silently differ."""


def check_not_erased(conn: sa.Connection, session: str, position: int,
                     own: Sequence[RecordedEvent], scopes: Sequence[str], wide: bool) -> None:
    """Raise ``ErasedHistory`` when the prefix of ``session`` at ``position`` lost events
    to an erasure: its own, its scope's, or (``wide`` profiles) a peer session's."""
    from ctxledger.store.erase import erasures

    found = erasures(conn)
    if not found:
        return
    scope_streams = {f"{SCOPE_PREFIX}{scope}" for scope in scopes}
    for erasure in found:
        hit = session in erasure.streams or (
            erasure.first <= position and (
                bool(scope_streams.intersection(erasure.streams))
                or (wide and bool(set(scopes).intersection(erasure.scopes)))))
        if hit:
            raise ErasedHistory(
                f"session {session!r} at position {position}: erased (the erasure at"
                f" position {erasure.position}, reason: {erasure.reason})")
    if any(event.type == ERASED_TYPE for event in own):
        raise ErasedHistory(f"session {session!r} at position {position}: erased")


@dataclass(frozen=True, slots=True)
class Prefix:
    """The events a replay folds: the needed streams, cut at ``position``, by position."""

    session: str
    scope: str
    position: int
    events: tuple[RecordedEvent, ...]
    streams: tuple[str, ...]
    scopes: tuple[str, ...] = ()
    """Every scope whose streams were read (``scope`` last); more than one only for a
    timeline of a session that changed scope, whose earlier steps need the older one."""


@dataclass(frozen=True, slots=True)
class TimelineStep:
    """The assembly right after an event that changed the profile's inputs."""

    message: int
    """The session's ``message.appended`` events so far: 1-based, the step of its first
    message is message 1 (0 for a step before any message)."""
    position: int
    """The log position of the event stepped on."""
    seq: int
    """The session's stream version at this step (a message step: the message's)."""
    message_id: str | None
    """The id of the message stepped on; None when the step is another event."""
    assembly: Assembly
    step: int = 0
    """1-based: the timeline's first step is step 1."""
    event_type: str = "message.appended"
    """The type of the event stepped on."""
    stream_id: str = ""
    """The stream of the event stepped on: the session's, its scope's or a peer's."""

    @property
    def is_message(self) -> bool:
        """True when the step is one of the session's messages."""
        return self.message_id is not None


def resolve_until(conn: sa.Connection, until: int | datetime | None,
                  now: datetime) -> int:
    """The log position a replay stops at: a position, the prefix recorded by a time, or
    the head. A position beyond the head or a time after ``now`` is an error."""
    head = head_position(conn)
    if until is None:
        return head
    if isinstance(until, bool) or not isinstance(until, int | datetime):
        raise ReplayError("until must be a log position or an aware datetime")
    if isinstance(until, int):
        if until < 0:
            raise ReplayError(f"until {until} is not a log position (positions start at 1)")
        if until > head:
            raise ReplayError(f"position {until} is beyond the head of the log ({head})")
        return until
    try:
        when = ensure_utc(until, "until")
    except ValueError as exc:
        raise ReplayError(str(exc)) from None
    if when > now:
        raise ReplayError(f"until {when.isoformat()} is in the future")
    return position_at(conn, when)


def scope_of(events: Sequence[RecordedEvent]) -> str:
    """The scope a session belongs to after ``events`` (its last ``session.started``)."""
    return scopes_of(events)[-1]


def scopes_of(events: Sequence[RecordedEvent]) -> list[str]:
    """Every scope the session belonged to over ``events``, in order, the current last."""
    scopes: list[str] = []
    for event in events:
        if event.type == "session.started":
            scope = str(event.data.get("scope") or DEFAULT_SCOPE)
            if scope in scopes:
                scopes.remove(scope)
            scopes.append(scope)
    return scopes or [DEFAULT_SCOPE]


def read_prefix(conn: sa.Connection, session: str, position: int, profile: str, *,
                every_scope: bool = False) -> Prefix:
    """The events ``profile`` needs to replay ``session`` at ``position``; with
    ``every_scope``, those of every scope it was in by then (a timeline's steps)."""
    own = read_stream_until(conn, session, position)
    if not own:
        raise ReplayError(f"unknown session {session!r} at position {position}")
    scopes = scopes_of(own) if every_scope else [scope_of(own)]
    streams = [session]
    read = [own]
    wide = scope_wide(profile)
    check_not_erased(conn, session, position, own, scopes, wide)
    for scope in scopes:
        streams.append(f"{SCOPE_PREFIX}{scope}")
        read.append(read_stream_until(conn, streams[-1], position))
        if wide:
            for member in members_until(conn, scope, position):
                if member not in streams:
                    streams.append(member)
                    read.append(read_stream_until(conn, member, position))
    merged = tuple(heapq.merge(*read, key=lambda event: event.position))
    return Prefix(session, scopes[-1], position, merged, tuple(streams), tuple(scopes))


class ScratchProjections:
    """Every built-in projection, folded into a scratch store one event at a time.

    Rows stay cached in the ``RowStore`` (the scratch tables start empty, so nothing is
    ever read back); ``settle`` writes what changed and moves the checkpoints, so the
    read view sees the state at that position.
    """

    def __init__(self) -> None:
        self._engine = scratch_engine()
        self._conn = self._engine.connect()
        self._transaction = self._conn.begin()
        self._runner = ProjectionRunner(builtin_projections())
        tables = [t for p in self._runner.projections for t in p.tables]
        self._rows = RowStore(self._conn, empty=tables)

    def fold(self, events: Sequence[RecordedEvent]) -> None:
        """Apply ``events`` (in position order) to every projection, and keep them in the
        scratch log too: a read view may check an event's hash there (the brief profile's
        snippet index is named by one), exactly as it does in the live log."""
        if events:
            self._conn.execute(log_events.insert(), [{
                "position": e.position, "stream_id": e.stream_id,
                "stream_version": e.stream_version, "event_id": e.event_id,
                "type": e.type, "schema_version": e.schema_version,
                "data": canonical_json(e.data), "metadata": canonical_json(e.metadata),
                "recorded_at": e.recorded_at, "prev_hash": e.prev_hash, "hash": e.hash}
                for e in events])
        # After the insert: reducers may look events up by id (``RowStore.event_version``).
        self._runner.dispatch(events, self._rows)

    def settle(self, position: int) -> None:
        """Write the folded rows and mark every projection as being at ``position``."""
        self._rows.flush()
        self._conn.execute(checkpoints.update().values(position=position, inline=False))

    def view(self, session: str, request: ViewRequest) -> SessionView:
        """The read view of ``session`` as folded and settled so far."""
        return load_session_view(self._conn, session, request)

    def close(self) -> None:
        """Drop the scratch database."""
        self._transaction.rollback()
        self._conn.close()
        self._engine.dispose()


@contextmanager
def scratch_projections() -> Iterator[ScratchProjections]:
    """A ``ScratchProjections`` closed on exit."""
    scratch = ScratchProjections()
    try:
        yield scratch
    finally:
        scratch.close()


class Assembler:
    """Assembles from a scratch store with token counts read from the live cache.

    One counter per encoding is shared by every step of a replay, so a timeline counts
    each text once. Nothing is written back: new counts stay in memory. With ``warm``
    (a timeline's steps), the steps share the live path's memos (``SessionMemos``: the
    decisions, messages and report rows a step did not change are reused, with their
    JSON) and the policy, derived again only after a fold that changed the settings.
    """

    def __init__(self, live: sa.Connection, profile: str, policy: Policy | None, *,
                 warm: bool = False) -> None:
        self.profile = profile
        self.policy = policy
        self._store = TableTokenStore(live)
        self._counters: dict[str, TokenCounter] = {}
        self._memos = SessionMemos() if warm else None
        self._warm = warm
        self._derived: Policy | None = None

    def folded(self, events: Sequence[RecordedEvent]) -> None:
        """Note ``events`` were folded: a setting or a scope move derives the policy
        again at the next step (nothing else changes it)."""
        if self._derived is not None and any(e.type in POLICY_EVENTS for e in events):
            self._derived = None

    def policy_at(self, scratch: ScratchProjections, session: str) -> Policy:
        """The policy given, or the one the settings folded so far give."""
        if self.policy is not None:
            return self.policy
        if self._derived is not None:
            return self._derived
        derived = policy_for(self.profile, scratch.view(session, ViewRequest()).settings)
        if self._warm:
            self._derived = derived
        return derived

    def assemble(self, scratch: ScratchProjections, session: str, now: datetime,
                 policy: Policy | None = None) -> Assembly:
        """The assembly of ``session`` at ``now`` from what ``scratch`` holds, under
        ``policy`` (default: the one given, or the settings')."""
        if policy is None:
            policy = self.policy_at(scratch, session)
        key = counter_key(policy.token_encoding, policy.text_unit)
        counter = self._counters.get(key)
        if counter is None:
            counter = self._counters[key] = TokenCounter(
                policy.token_encoding, store=self._store, unit=policy.text_unit)
        memos = self._memos
        view = scratch.view(session, request_for(self.profile, policy, now, counter, memos))
        return assemble_with_caches(view, self.profile, now, policy, counter, memos)[0]


POLICY_EVENTS: frozenset[str] = SETTING_EVENTS | {"session.started"}
"""Events after which a timeline derives its policy again: the settings, and the scope
whose defaults they fall back on."""


def replay_prefix(live: sa.Connection, prefix: Prefix, profile: str, policy: Policy | None,
                  now: datetime) -> Assembly:
    """Fold ``prefix`` into a scratch store and assemble it at ``now``."""
    with scratch_projections() as scratch:
        scratch.fold(prefix.events)
        scratch.settle(prefix.position)
        assembly = Assembler(live, profile, policy).assemble(scratch, prefix.session, now)
    index = MessageIndex(prefix.session, prefix.events)
    return assembly.with_message_seqs(index.at(prefix.position))


def default_now(live: sa.Connection, position: int) -> datetime:
    """``recorded_at`` of the last event of the prefix ending at ``position``."""
    found = recorded_at_until(live, position)
    if found is None:
        raise ReplayError(f"the log holds no event at or before position {position}")
    return found


def replay(live: sa.Connection, session: str, *, profile: str, until: int | datetime | None,
           policy: Policy | None, now: datetime | None, clock_now: datetime) -> Assembly:
    """The assembly of ``session`` as of ``until`` (see the module docstring)."""
    position = resolve_until(live, until, clock_now)
    prefix = read_prefix(live, session, position, profile)
    when = default_now(live, position) if now is None else _aware(now)
    return replay_prefix(live, prefix, profile, policy, when)


def timeline(live: sa.Connection, session: str, *, profile: str,
             until: int | datetime | None, policy: Policy | None, clock_now: datetime,
             progress: Progress | None = None,
             only: range | None = None) -> list[TimelineStep]:
    """Every step of ``iter_timeline`` in a list (each holds its whole assembly: for a
    short session, or a window of steps; a long one is read step by step)."""
    return list(iter_timeline(live, session, profile=profile, until=until, policy=policy,
                              clock_now=clock_now, progress=progress, only=only))


def iter_timeline(live: sa.Connection, session: str, *, profile: str,
                  until: int | datetime | None, policy: Policy | None,
                  clock_now: datetime, progress: Progress | None = None,
                  only: range | None = None,
                  cancel: CancelToken | None = None
                  ) -> Generator[TimelineStep, None, None]:
    """The assembly after each event of the prefix that changes ``profile``'s inputs
    (``Profile.inputs``), from the session's first event on; each step's ``now`` is its
    event's ``recorded_at``, so a step equals ``replay(until=<its position>)``.

    Steps come one at a time and nothing of a step is kept once the next is made, so a
    caller that keeps only what it needs of each (a record, a decision) holds one
    assembly at a time whatever the session's length. ``only``: assemble just these step
    numbers (the fold still reads every event once). ``cancel`` is checked before every
    step of the fold: once tripped, ``Cancelled`` ends the iteration."""
    for (step,) in _iter_steps(live, session, profile, until, (policy,), clock_now,
                               progress, only, cancel):
        yield step


def iter_timeline_pairs(live: sa.Connection, session: str, *, profile: str,
                        until: int | datetime | None,
                        policies: tuple[Policy | None, Policy | None],
                        clock_now: datetime, cancel: CancelToken | None = None
                        ) -> Generator[tuple[TimelineStep, TimelineStep], None, None]:
    """The steps of ``iter_timeline`` under two policies at once (a what-if): one read
    and one fold, each step assembled under both, one pair held at a time."""
    # Unpacked: it narrows each tuple to a pair.
    for old, new in _iter_steps(live, session, profile, until, policies, clock_now,  # noqa: UP028
                                None, None, cancel):
        yield old, new


def _iter_steps(live: sa.Connection, session: str, profile: str,
                until: int | datetime | None, policies: Sequence[Policy | None],
                clock_now: datetime, progress: Progress | None, only: range | None,
                cancel: CancelToken | None
                ) -> Generator[tuple[TimelineStep, ...], None, None]:
    """``iter_timeline``'s steps, each assembled under every one of ``policies`` (one
    assembler and its memos per policy, over one scratch fold)."""
    _check_step(cancel, session, 1, None)
    position = resolve_until(live, until, clock_now)
    prefix = read_prefix(live, session, position, profile, every_scope=True)
    marks = step_indexes(prefix, get_profile(profile).inputs)
    index = MessageIndex(session, prefix.events)
    assemblers = [Assembler(live, profile, policy, warm=True) for policy in policies]
    messages = seq = 0
    with scratch_projections() as scratch:
        start = 0
        for number, at in enumerate(marks, start=1):
            _check_step(cancel, session, number, len(marks))
            batch = prefix.events[start:at + 1]
            scratch.fold(batch)
            for assembler in assemblers:
                assembler.folded(batch)
            start = at + 1
            for event in batch:
                if event.stream_id == session:
                    seq = event.stream_version
                    messages += event.type == "message.appended"
            if only is not None and number not in only:
                continue
            event = prefix.events[at]
            scratch.settle(event.position)
            seqs = index.at(event.position)
            is_message = event.stream_id == session and event.type == "message.appended"
            steps = tuple(TimelineStep(
                message=messages, position=event.position, seq=seq,
                message_id=message_id_of(event) if is_message else None,
                assembly=assembler.assemble(scratch, session, event.recorded_at
                                            ).with_message_seqs(seqs),
                step=number, event_type=event.type, stream_id=event.stream_id)
                for assembler in assemblers)
            yield steps
            del steps
            if progress is not None:
                progress(number, len(marks))


def fold_assemblies(live: sa.Connection, session: str, profile: str,
                    wanted: Sequence[tuple[int, datetime, Policy | None, int]],
                    clock_now: datetime, cancel: CancelToken | None = None
                    ) -> Iterator[tuple[int, Assembly]]:
    """Assemblies of ``session`` at many positions by one fold (an audit's records).

    ``wanted``: (position, now, policy or None, key), by position; each is assembled as
    ``replay(until=position, now=now, policy=policy)`` would, and comes back with its key.
    One whose position is before the session, or whose assembly fails, is left out (a
    replay of its own names what is wrong). Erased history raises ``ErasedHistory``."""
    if not wanted:
        return
    position = resolve_until(live, wanted[-1][0], clock_now)
    prefix = read_prefix(live, session, position, profile, every_scope=True)
    first = next(e.position for e in prefix.events if e.stream_id == session)
    positions = [event.position for event in prefix.events]
    assembler = Assembler(live, profile, None, warm=True)
    with scratch_projections() as scratch:
        done = 0
        for at, now, policy, key in wanted:
            check(cancel)
            if at < first:
                continue
            upto = bisect.bisect_right(positions, at, lo=done)
            batch = prefix.events[done:upto]
            scratch.fold(batch)
            assembler.folded(batch)
            done = upto
            scratch.settle(at)
            try:
                assembly = assembler.assemble(scratch, session, _aware(now), policy)
            except (LedgerError, ValueError):
                continue
            yield key, assembly


def _check_step(cancel: CancelToken | None, session: str, number: int,
                total: int | None) -> None:
    """``check(cancel)``, logging the one line an operator (and the tests) see when the
    work stops, wherever it stops (before the fold too)."""
    try:
        check(cancel)
    except Cancelled as exc:
        of = "" if total is None else f" of {total}"
        _log.info("timeline of %r stopped before step %d%s: %s", session, number, of, exc)
        raise


def timeline_length(live: sa.Connection, session: str, *, profile: str,
                    until: int | datetime | None, clock_now: datetime) -> int:
    """How many steps ``timeline`` has (reads the events; assembles nothing)."""
    position = resolve_until(live, until, clock_now)
    prefix = read_prefix(live, session, position, profile, every_scope=True)
    return len(step_indexes(prefix, get_profile(profile).inputs))


def step_indexes(prefix: Prefix, inputs: Inputs) -> list[int]:
    """Indexes in ``prefix.events`` of the events a timeline steps on: those that change
    ``inputs``, from the session's first event on (before it there is no session)."""
    scope_streams = {f"{SCOPE_PREFIX}{scope}" for scope in prefix.scopes or (prefix.scope,)}
    marks: list[int] = []
    started = False
    for i, event in enumerate(prefix.events):
        where: Where = ("session" if event.stream_id == prefix.session
                        else "scope" if event.stream_id in scope_streams else "peer")
        started = started or where == "session"
        if started and inputs.changed_by(event.type, where):
            marks.append(i)
    return marks


def _aware(value: datetime) -> datetime:
    try:
        return ensure_utc(value, "now")
    except ValueError as exc:
        raise ReplayError(str(exc)) from None


def policy_data(policy: Policy) -> dict[str, Any]:
    """A policy's canonical JSON data (what ``record_assembly`` stores)."""
    data: dict[str, Any] = policy.model_dump(mode="json")
    return data
