"""``Ledger``: the one object a user needs. It owns the engine, the log and the projections."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Generator, Mapping, Sequence
from contextlib import closing
from dataclasses import replace
from datetime import datetime
from itertools import groupby
from types import TracebackType
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from ctxledger import _migrate as migrate
from ctxledger._cancel import CancelToken
from ctxledger._config import DEFAULT_USAGE_DAYS, resolve_db_url
from ctxledger._ids import derived_event_id
from ctxledger._setting_checks import check_event
from ctxledger.projections.base import Projection
from ctxledger.projections.registry import builtin_projections
from ctxledger.projections.runner import Progress, ProjectionRunner, ProjectionStatus
from ctxledger.projections.session_view import SessionView, ViewRequest
from ctxledger.projections.view_loader import (
    load_session_scope,
    load_session_view,
    prefix_snapshot,
    read_snapshot,
)
from ctxledger.store.anchor import Anchor, read_anchor
from ctxledger.store.clock import Clock, format_utc, system_clock
from ctxledger.store.errors import (
    DatabaseMissing,
    InvalidArgument,
    LedgerError,
    ReplicaNotReady,
)
from ctxledger.store.log import EventInput, EventLog
from ctxledger.store.records import AppendResult, NewEvent, RecordedEvent
from ctxledger.store.seal import Seal, SealSettings
from ctxledger.store.sql_engine import (
    create_engine,
    database_exists,
    require_schema,
    safe_url,
)
from ctxledger.store.strict import DEFAULT_MAX_EVENT_BYTES, INT64_MAX, check_time
from ctxledger.store.verify import VerifyReport
from ctxledger.store.witness import WITNESS_ENV, Witness, WitnessSettings, witness_from_spec

if TYPE_CHECKING:
    from ctxledger._agent_context import AgentContext
    from ctxledger._erase import ErasureReport
    from ctxledger._message_list import MessageList
    from ctxledger._observations import ObservationHit
    from ctxledger.assembler import Assembly, Policy, TokenCounter
    from ctxledger.assembler.caches import CacheWrite
    from ctxledger.assembler.memo import SessionMemos
    from ctxledger.assembler.setting_check import ProfileChoice
    from ctxledger.assembler.text import LengthUnit
    from ctxledger.jobs._rollup import RollupPolicy, RollupReport
    from ctxledger.jobs._usage import UsageReport
    from ctxledger.projections.session_stats import SessionSummary
    from ctxledger.timetravel._audit import AuditReport, WhatIfReport
    from ctxledger.timetravel._markers import TimelineChart
    from ctxledger.timetravel._replay import TimelineStep
    from ctxledger.timetravel._why import WhyReport

_PAGE_CHUNK = 16
"""Events ``events_page`` reads at once."""

# The assembler (numpy, bm25s, tiktoken), the rollup and the usage report are imported by
# the methods that use them: a CLI call that only reads state must not pay for them.

# Assemblies recorded by this thread that report_usage finds without a query (bounded).
_RECORDED_LIMIT = 1_000

# Beyond this many cached counts a long-lived counter starts afresh (bounded memory).
_COUNTER_MEMO_LIMIT = 200_000

_log = logging.getLogger("ctxledger.ledger")  # the public name, not the module's
_ONE_EVENT = (Mapping, NewEvent)  # built once: ``A | B`` in isinstance makes a union per call


class Ledger:
    """An event-sourced session store with inline projections.

    Open it with ``Ledger.open(url)``; the schema is created or upgraded, and projections
    whose version changed are rebuilt, before it is returned.
    """

    def __init__(self, engine: sa.Engine, *, clock: Clock = system_clock,
                 max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
                 projections: Sequence[Projection] | None = None,
                 seal: SealSettings | None = None,
                 witness: Witness | str | None = None,
                 witness_settings: WitnessSettings | None = None,
                 read_only: bool = False) -> None:
        self.engine = engine
        self.clock = clock
        self.read_only = read_only
        """Opened read-only (a read replica): every write raises ``ReadOnlyLedger`` and
        assemblies save no caches."""
        self.runner = ProjectionRunner(
            projections if projections is not None else builtin_projections(), clock=clock)
        # Setting values that could never work (agent manifests, policy settings) are
        # refused by a hook every append path runs (see ctxledger._setting_checks).
        self.log = EventLog(engine, clock=clock, max_event_bytes=max_event_bytes,
                            in_transaction=self.runner.apply_inline, seal=seal,
                            check=check_event, shared_keys=self.runner.shared_keys,
                            witness=(witness_from_spec(witness) if isinstance(witness, str)
                                     else witness),
                            witness_settings=witness_settings, read_only=read_only)
        # One token counter per thread and encoding: a counter's memo is not thread-safe,
        # and a shared lock would make threads assembling different sessions wait.
        self._local = threading.local()
        self._session_memos: SessionMemos | None = None
        self._memos_lock = threading.Lock()

    @classmethod
    def open(cls, url: str | None = None, *, clock: Clock = system_clock,
             max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES, upgrade: bool = True,
             progress: Progress | None = None, seal: SealSettings | None = None,
             load_vocabulary: bool = True, create: bool = True,
             witness: Witness | str | None = None,
             witness_settings: WitnessSettings | None = None,
             read_only: bool = False,
             **engine_kwargs: Any) -> Ledger:
        """Open (creating or migrating) the database at ``url``.

        ``url`` defaults as the command line's does (``ctxledger._config``). Projections
        that are new, changed or behind are brought up to date before returning.
        ``seal`` says when appends seal the log on their own (default: every 10,000).
        With ``load_vocabulary`` the assembler is made ready now (``prepare_assembler``), so
        no assembly pays for it (or fails on it) midway; other encodings load on first use.
        With ``create=False`` a database that does not exist yet (no SQLite file, no
        ``events`` table) raises ``DatabaseMissing`` instead of being created. A PostgreSQL
        ``search_path`` naming no schema that exists raises ``SchemaMissing``.
        ``witness`` (a ``Witness`` or its spec: ``file:///path``, a database URL,
        ``https://...``; default ``$CTXLEDGER_WITNESS``, ``""`` for none) receives the log's
        head after commits as ``witness_settings`` say (``store.witness``), and ``verify``
        checks the log against every head it holds.

        ``read_only`` opens a database this process must not write, such as a PostgreSQL
        hot standby (a read replica): nothing is created, upgraded or refreshed, there is
        no witness, every write raises ``ReadOnlyLedger`` and an assembly saves no caches
        (its result is the same). A database at another schema revision, or with a
        projection behind the log or built by another version, raises
        ``ReplicaNotReady`` naming it: the primary must be opened (and so migrated and
        refreshed) by this release first.
        """
        if read_only:
            return cls._open_read_only(resolve_db_url(url), clock=clock,
                                       max_event_bytes=max_event_bytes,
                                       load_vocabulary=load_vocabulary, **engine_kwargs)
        if witness is None:
            witness = os.environ.get(WITNESS_ENV) or None
        engine = create_engine(resolve_db_url(url), **engine_kwargs)
        try:
            require_schema(engine)
            if not create and not database_exists(engine):
                raise DatabaseMissing(
                    f"no ctxledger database at {safe_url(engine.url)};"
                    " run 'ctxledger init' or append to create one")
            if upgrade:
                migrate.upgrade(engine)
            ledger = cls(engine, clock=clock, max_event_bytes=max_event_bytes, seal=seal,
                         witness=witness or None, witness_settings=witness_settings)
            ledger.refresh_projections(progress=progress)
            if load_vocabulary:
                ledger.prepare_assembler()
        except BaseException:
            engine.dispose()
            raise
        return ledger

    @classmethod
    def _open_read_only(cls, url: str, *, clock: Clock, max_event_bytes: int,
                        load_vocabulary: bool, **engine_kwargs: Any) -> Ledger:
        engine = create_engine(url, **engine_kwargs)
        try:
            require_schema(engine)
            if not database_exists(engine):
                raise DatabaseMissing(f"no ctxledger database at {safe_url(engine.url)}")
            where = f"read-only open of {safe_url(engine.url)}"
            if not migrate.at_head(engine):
                raise ReplicaNotReady(
                    f"{where}: the schema is at revision {migrate.current_revision(engine)},"
                    f" this release needs {migrate.head_revision()}; open the primary with"
                    " this release first (it migrates)")
            ledger = cls(engine, clock=clock, max_event_bytes=max_event_bytes,
                         read_only=True)
            for status in ledger.projection_status():
                if status.stored_version is None:
                    raise ReplicaNotReady(
                        f"{where}: projection {status.name} has never been built there;"
                        " open the primary with this release first (it builds it)")
                if status.needs_rebuild:
                    raise ReplicaNotReady(
                        f"{where}: projection {status.name} was built by version"
                        f" {status.stored_version}, this release has {status.version};"
                        " open the primary with this release first (it rebuilds)")
                if status.behind:
                    raise ReplicaNotReady(
                        f"{where}: projection {status.name} is at position"
                        f" {status.position} but the log ends at {status.head};"
                        " refresh it on the primary first")
            if load_vocabulary:
                ledger.prepare_assembler()
        except BaseException:
            engine.dispose()
            raise
        return ledger

    def prepare_assembler(self) -> None:
        """Import the assembler and its profiles and load the default vocabulary.

        The CLI imports them lazily to start fast. A library user gets them at ``open``:
        then an assembly never stops midway to load a vocabulary. (Defining the models
        under a frozen clock is safe: time fields use ``store.time_fields.Instant``.)
        """
        import ctxledger.assembler.api  # noqa: F401
        from ctxledger.assembler.encodings import default_loader
        from ctxledger.assembler.profiles import get_profile, profile_names
        from ctxledger.assembler.tokens import DEFAULT_ENCODING

        for name in profile_names():  # imported on first use otherwise
            get_profile(name)
        default_loader().get(DEFAULT_ENCODING)

    # -- lifecycle ----------------------------------------------------------------------

    def close(self) -> None:
        """Send the witness any head still unsent, then release every connection."""
        try:
            self.log.close_witness()
        finally:
            self.engine.dispose()

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    # -- writing and reading ------------------------------------------------------------

    def append(self, stream_id: str, events: Sequence[EventInput] | EventInput,
               expected_version: int | None = None) -> AppendResult:
        """Append events atomically to one stream; projections update in the same transaction.

        ``events`` is a list of ``{"type", "data"[, "id", "metadata"]}`` mappings (or one).
        The result's ``warnings`` name each lorebook entry a ``card.set`` or
        ``lorebook.set`` sets that cannot work as written (a regex key RE2 refuses...),
        then each setting key a ``setting.changed`` sets that no profile reads, with the
        nearest known key (``assembler.setting_check.unknown_setting_warning``).
        """
        batch: Sequence[EventInput] = (
            [events] if type(events) is dict or isinstance(events, _ONE_EVENT) else events)
        result = self.log.append(stream_id, batch, expected_version=expected_version)
        found: list[str] = []
        if any(_event_type(event) in _BOOK_EVENTS for event in batch):
            from ctxledger._lorebook_import import lorebook_warnings

            found += lorebook_warnings(batch)
        keys = [key for key in map(_setting_key, batch) if key is not None]
        if keys:
            from ctxledger.assembler.setting_check import unknown_setting_warnings

            found += unknown_setting_warnings(keys)
        return replace(result, warnings=tuple(found)) if found else result

    def append_messages(self, session: str, messages: Sequence[Mapping[str, Any]], *,
                        system: Any = None, expected_version: int | None = None,
                        metadata: Mapping[str, Any] | None = None) -> AppendResult:
        """Append a conversation's chat messages to ``session``, in order, atomically.

        ``messages`` is a list in OpenAI's chat-completions shape, or Anthropic's
        messages with its system prompt as ``system`` (a string or text blocks; it comes
        first), or the canonical form (``store.chat``). A message that is several
        canonical messages (an Anthropic user turn holding tool results) is split into
        them, in block order; its ``message_id`` ``m`` becomes ``m#1``, ``m#2``... for the
        pieces. Every message is checked before any is written: one bad message writes
        nothing, and the error names it (``messages[2]: ...``). ``metadata`` goes on every
        event.
        """
        from ctxledger._chat_input import message_batch
        from ctxledger.store.errors import BatchEventError

        batch = message_batch(messages, system, metadata)
        try:
            return self.append(session, batch.events, expected_version=expected_version)
        except BatchEventError as exc:
            raise batch.error(exc.index, exc.reason) from None

    def messages(self, session: str, *, last: int | None = None) -> list[RecordedEvent]:
        """The ``message.appended`` events of ``session`` that still count (not retracted,
        not replaced by a later message of the same id), in order; with ``last``, only
        the newest ``last``. Read through the message index, so ``last`` costs O(last)."""
        if last is not None and (isinstance(last, bool) or last < 0):
            raise InvalidArgument(f"last must be an integer >= 0, got {last!r}")
        if last == 0:
            return []
        with self.log.connection() as conn, read_snapshot(conn):
            return _live_messages(conn, session, last)

    def messages_since(self, session: str, known: MessageList | None = None) -> MessageList:
        """``messages(session)`` with the stream's version, read incrementally: given what
        this returned before for ``session``, only the messages appended since are read
        and decoded, unless one it holds was retracted, replaced or erased since (then
        every message is read again). For a caller that asks for the whole history again
        and again, such as a chat adapter on every turn."""
        from ctxledger._message_list import read_message_list

        with self.log.connection() as conn, read_snapshot(conn):
            return read_message_list(conn, session, known)

    def _messages_at_version(self, session: str, last: int | None
                             ) -> tuple[list[RecordedEvent], int]:
        """``messages(session, last=last)`` and the stream's version, read in one snapshot."""
        from ctxledger.store.append import stream_head

        with self.log.connection() as conn, read_snapshot(conn):
            return _live_messages(conn, session, last), stream_head(conn, session)[0]

    def pop_message(self, session: str, *, metadata: Mapping[str, Any] | None = None
                    ) -> RecordedEvent | None:
        """Retract the newest message of ``session`` and return it; None when it has none.

        Safe beside other writers of the session, in this process or another: the
        retraction is appended only if the session has not changed since its newest
        message was read (``expected_version``); otherwise the newest is read again. So
        concurrent pops each return a different message. Each retry means another
        append to the session committed, so no limit on retries is needed.
        """
        from ctxledger._message_index import message_id_of
        from ctxledger.store.errors import ConcurrencyError

        while True:
            newest, version = self._messages_at_version(session, 1)
            if not newest:
                return None
            try:
                self.retract_messages(session, [message_id_of(newest[0])], metadata=metadata,
                                      expected_version=version)
            except ConcurrencyError:
                continue
            return newest[0]

    def clear_messages(self, session: str, *, metadata: Mapping[str, Any] | None = None
                       ) -> list[RecordedEvent]:
        """Retract every message of ``session`` (one batch) and return them, in order.
        Safe beside other writers as ``pop_message`` is: the batch retracts the messages
        the session holds when it commits, each once."""
        from ctxledger._message_index import message_id_of
        from ctxledger.store.errors import ConcurrencyError

        while True:
            live, version = self._messages_at_version(session, None)
            try:
                self.retract_messages(session, [message_id_of(event) for event in live],
                                      metadata=metadata, expected_version=version)
            except ConcurrencyError:
                continue
            return live

    def history_window(self, session: str, context_limit: int, *,
                       response_reserve: int = 0) -> list[RecordedEvent]:
        """The messages of ``session`` that the chat-history window keeps under
        ``context_limit`` tokens less ``response_reserve`` (the ``card`` profile's window,
        with the session's other settings), as ``message.appended`` events in order: what
        a framework adapter sends instead of the raw tail."""
        from ctxledger._message_index import message_id_of
        from ctxledger.assembler.api import policy_for

        base = policy_for("card", self.view(session).settings)
        policy = type(base).model_validate({**base.model_dump(), "context_limit": context_limit,
                                            "response_reserve": response_reserve})
        assembly = self.assemble(session, "card", policy=policy)
        kept = {message.item.removeprefix("message:") for message in assembly.messages
                if message.item is not None}
        return [event for event in self.messages(session) if message_id_of(event) in kept]

    def retract_messages(self, session: str, message_ids: Sequence[str], *,
                         metadata: Mapping[str, Any] | None = None,
                         expected_version: int | None = None) -> AppendResult | None:
        """Withdraw messages of ``session`` (one ``message.retracted`` each, in one
        atomic batch); None when ``message_ids`` is empty. The messages stay in the log,
        so replay still shows them before the retraction. ``expected_version`` is
        ``append``'s (``ConcurrencyError`` when the session moved on)."""
        if not message_ids:
            return None
        extra = {"metadata": dict(metadata)} if metadata else {}
        return self.append(session, [{"type": "message.retracted",
                                      "data": {"message_id": message_id}, **extra}
                                     for message_id in message_ids],
                           expected_version=expected_version)

    def events(self, stream_id: str | None = None, *, after: int = 0,
               limit: int | None = None, until: int | datetime | None = None
               ) -> list[RecordedEvent]:
        """Read events: one stream, or the whole log after a position, up to ``until``.

        A negative ``after`` or ``limit`` raises ``InvalidArgument`` (a slice would
        silently drop events from the end)."""
        for name, value in (("after", after), ("limit", limit)):
            if value is not None and (isinstance(value, bool) or value < 0):
                raise InvalidArgument(f"{name} must be an integer >= 0, got {value!r}")
        # Positions are 64-bit, so a larger bound means "none"; the drivers would overflow
        # on it (SQLite in Python, PostgreSQL in SQL), each differently.
        if after > INT64_MAX:
            return []
        if limit is not None and limit > INT64_MAX:
            limit = None
        until_position = until if isinstance(until, int) else None
        if until_position is not None and until_position > INT64_MAX:
            until_position = None
        until_time = check_time(until, "until") if isinstance(until, datetime) else None
        if stream_id is not None:
            if until_time is not None:
                # The same prefix of the log as read_all, even if the clock stepped back.
                until_position = self.log.position_at(until_time)
            return [e for e in self.log.read_stream(stream_id)
                    if e.position > after
                    and (until_position is None or e.position <= until_position)][:limit]
        return self.log.read_all(after, limit, until_position=until_position,
                                 until_time=until_time)

    def events_page(self, stream_id: str | None = None, *, after: int = 0, limit: int,
                    max_bytes: int, size: Callable[[RecordedEvent], int]
                    ) -> tuple[list[RecordedEvent], bool]:
        """A page of ``events``: at most ``limit`` events after position ``after`` and at
        most ``max_bytes`` of them as ``size`` measures each, but always one when there
        is one (a page stops before the event that would overflow it). Read a few events
        at a time, so a page of large events never holds more than it returns. Returns
        the events and whether more may follow (the page is full by count or bytes)."""
        if limit < 1 or max_bytes < 1:
            raise InvalidArgument("limit and max_bytes must be at least 1")
        kept: list[RecordedEvent] = []
        used = 0
        version = 0  # of ``stream_id``: the last one read
        while len(kept) < limit:
            want = min(limit - len(kept), _PAGE_CHUNK)
            if stream_id is None:
                chunk = self.log.read_all(after, want)
            else:
                chunk = [e for e in self.log.read_stream(stream_id, version + 1,
                                                         version + _PAGE_CHUNK)]
                if chunk:
                    version = chunk[-1].stream_version
            exhausted = len(chunk) < (want if stream_id is None else _PAGE_CHUNK)
            for event in chunk:
                if event.position <= after:
                    continue
                cost = size(event)
                if kept and used + cost > max_bytes:
                    return kept, True
                kept.append(event)
                used += cost
                after = event.position
                if len(kept) == limit:
                    return kept, True
            if exhausted:
                return kept, False
        return kept, True

    def head(self) -> int:
        """The highest position in the log."""
        return self.log.head_position()

    def replay_lag(self) -> float | None:
        """Seconds this database is behind its primary when it is a read replica (a
        PostgreSQL hot standby; 0.0 when it has replayed all it received); None when it
        is no replica."""
        return self.log.replay_lag()

    # -- projection state ---------------------------------------------------------------

    def view(self, session: str, request: ViewRequest | None = None) -> SessionView:
        """A plain-data snapshot of one session's projections (what the assembler reads)."""
        with self.log.connection() as conn:
            return load_session_view(conn, session, request or ViewRequest())

    def scope_of(self, session: str) -> str | None:
        """The scope session ``session`` belongs to, or None when there is no such
        session."""
        with self.log.connection() as conn:
            return load_session_scope(conn, session)

    def state(self, session: str, *, now: datetime | None = None,
              agent: str | None = None, starting_in: str | None = None) -> dict[str, Any]:
        """The session's projection state as JSON-ready data (counts, chapter, settings,
        top tools, documents in compact form).

        ``now`` (default: the clock) is where the 7-day tool-usage window ends. ``agent``
        scopes the state to that agent type's manifest (defaults plus the setting
        ``agent_manifests``), adding ``_agent`` and ``_savings``; an agent without a
        manifest gets the full state. ``starting_in`` names the scope a session that has
        not started would start in: its state is then that of a new session there.
        """
        from ctxledger.projections.state import session_state

        when = check_time(now if now is not None else self.clock(), "now")
        with self.log.connection() as conn:
            return session_state(conn, session, now=when, agent=agent,
                                 starting_in=starting_in)

    # -- observations (coding agents) ---------------------------------------------------

    def record_observation(self, scope: str, kind: str, text: str, *,
                           files: Sequence[str] = (),
                           session: str | None = None) -> RecordedEvent:
        """Record something an agent noticed (``observation.recorded``) in ``scope``, and
        return the event.

        It goes to ``session`` when given (started in ``scope`` in the same transaction if
        it has not started; a session of another scope raises ``InvalidArgument``), else
        to the scope's session that has not ended and was active last, else to a new
        session ``mcp-<time>-<scope>`` started with it. ``files`` are kept in the event's
        metadata (``extra.files``) and, joined, as its ``source``. Bad arguments raise
        ``InvalidArgument`` and write nothing.
        """
        from ctxledger._observations import check_observation
        from ctxledger.projections.scope_sessions import FILES_KEY, active_session

        names = check_observation(kind, text, files)
        with self.log.connection() as conn:
            chosen = session if session is not None else active_session(conn, scope)
            current = None if chosen is None else load_session_scope(conn, chosen)
        if chosen is None:
            stamp = self.clock().strftime("%Y%m%dT%H%M%S%fZ")
            chosen = f"mcp-{stamp}-{scope}"[:200]
        if current is not None and current != scope:
            raise InvalidArgument(
                f"session {chosen!r} belongs to scope {current!r}, not {scope!r}")
        batch: list[EventInput] = []
        if current is None:
            batch.append({"type": "session.started", "data": {"scope": scope}})
        data: dict[str, Any] = {"kind": kind, "content": text}
        if names:
            data["source"] = ", ".join(names)
        batch.append({"type": "observation.recorded", "data": data,
                      "metadata": {"extra": {FILES_KEY: list(names)}} if names else {}})
        done = self.append(chosen, batch)
        return self.events(after=done.positions[-1] - 1, limit=1)[0]

    def search_observations(self, scope: str, query: str, *,
                            limit: int = 10) -> list[ObservationHit]:
        """The ``limit`` observations of ``scope`` that match ``query`` best, by BM25 over
        their text and files (the ``brief`` profile's analyzer and BM25), each with its
        event id, position, session and time. A blank query or a limit outside 1..100
        raises ``InvalidArgument``."""
        from ctxledger._observations import check_search, rank_observations
        from ctxledger.projections.scope_sessions import scope_observations

        check_search(query, limit)
        with self.log.connection() as conn:
            found = scope_observations(conn, scope)
        return rank_observations(found, query, limit)

    def sessions(self, scope: str) -> list[SessionSummary]:
        """The sessions currently in ``scope`` (title, agent, message count, last
        activity), newest activity first; an unknown scope has none."""
        from ctxledger.projections.session_stats import scope_sessions

        with self.log.connection() as conn:
            return scope_sessions(conn, scope)

    # -- coding-agent sessions (``ctxledger hook``) ---------------------------------------

    def record_in_session(self, session: str, scope: str,
                          events: Sequence[EventInput] = (), *,
                          tools: Sequence[Mapping[str, Any]] = (),
                          agent: str | None = None) -> AppendResult | None:
        """Append ``events`` to ``session`` in one transaction with what they need first:
        ``session.started`` in ``scope`` (with ``agent``) when the session has not
        started, and a ``tool.registered`` in the session's scope for each of ``tools``
        (``tool.registered`` data) the scope has no tool of that name yet.

        A session that started already keeps its scope. The ``session.started`` id is
        derived from the session, so two processes starting it at once write it once.
        Returns the result of appending ``events`` (None when there are none). Bad data
        writes nothing.
        """
        from ctxledger.projections.session_stats import sessions
        from ctxledger.projections.tool_registry import scope_tools
        from ctxledger.store.streams import SCOPE_PREFIX

        with self.log.transaction() as conn:
            known = conn.execute(sa.select(sessions.c.scope).where(
                sessions.c.stream_id == session)).scalar()
            if known is None:
                data: dict[str, Any] = {"scope": scope}
                if agent is not None:
                    data["agent"] = agent
                self.log.append_in(conn, session, [{
                    "type": "session.started", "data": data,
                    "id": derived_event_id(session, "session.started")}])
            where = scope if known is None else str(known)
            names = [str(tool["name"]) for tool in tools]
            registered = set(conn.execute(sa.select(scope_tools.c.name).where(
                scope_tools.c.scope == where, scope_tools.c.name.in_(names))).scalars()
                             ) if names else set()
            new = [tool for tool in tools if tool["name"] not in registered]
            if new:
                self.log.append_in(conn, SCOPE_PREFIX + where, [
                    {"type": "tool.registered", "data": dict(tool)} for tool in new])
            return self.log.append_in(conn, session, events) if events else None

    def end_session(self, session: str, scope: str, summary: str | None = None, *,
                    event_id: str | None = None) -> AppendResult:
        """Append ``session.ended`` to ``session`` (started in ``scope`` first if new).

        A session may end more than once (a coding agent stops after every turn); with
        no ``summary`` the summary it last ended with is kept, so a later end without one
        does not erase what the next session is told."""
        from ctxledger.projections.session_stats import sessions

        with self.log.connection() as conn:
            before = conn.execute(sa.select(sessions.c.end_summary).where(
                sessions.c.stream_id == session)).scalar()
        data: dict[str, Any] = {}
        if summary is not None or before is not None:
            data["summary"] = summary if summary is not None else before
        event: dict[str, Any] = {"type": "session.ended", "data": data}
        if event_id is not None:
            event["id"] = event_id
        done = self.record_in_session(session, scope, [event])
        assert done is not None
        return done

    # -- character cards ----------------------------------------------------------------

    def import_card(self, source: str | os.PathLike[str] | bytes | Mapping[str, Any], *,
                    session: str | None = None, scope: str | None = None,
                    event_id: str | None = None) -> AppendResult:
        """Append a card file as one ``card.set``: to ``session``, or to ``scope`` (the
        card of that scope's sessions that have none of their own); exactly one of them.

        ``source`` is a ``.json`` or ``.png`` file (its path or bytes) or the card's
        already-parsed JSON; the card is appended as the file holds it, as the whole
        card (``ctxledger.io._card_files.card_set_data``), so ``export_card`` gives it
        back. A file that is no card raises ``CardFileError``
        and a card the event model refuses raises ``EventValidationError``, writing
        nothing. Each lorebook entry that cannot work as written (a regex key RE2
        refuses...) is named in a ``LorebookWarning`` once the card is stored."""
        from ctxledger.io._card_files import card_set_data, read_card

        stream = _card_stream(session, scope)
        card = source if isinstance(source, Mapping) else read_card(source)
        event: dict[str, Any] = {"type": "card.set", "data": card_set_data(card)}
        if event_id is not None:
            event["id"] = event_id
        result = self.append(stream, event)
        _warn_lorebook(result)
        return result

    def export_card(self, *, session: str | None = None,
                    scope: str | None = None) -> dict[str, Any]:
        """The current card as a card file (``card_file``): a session's card as its
        sessions read it (the scope's card with the session's own fields over it), or a
        scope's own card. Exactly one of ``session``/``scope``; no card raises
        ``InvalidArgument``."""
        from ctxledger.projections.view_loader import load_card
        from ctxledger.store.character_card import card_file

        stream = _card_stream(session, scope)
        card: Mapping[str, Any]
        if scope is not None:
            # The scope stream as both session and scope: its own rows, nothing laid over.
            with self.log.connection() as conn:
                card = load_card(conn, stream, scope)
            what = f"scope {scope!r}"
        else:
            card = self.view(stream).card
            what = f"session {session!r}"
            if not card and self.log.stream_version(stream) == 0:
                raise InvalidArgument(f"unknown session {session!r}")
        if not card:
            raise InvalidArgument(f"{what} has no card")
        return card_file(card)

    def set_lorebook(self, scope: str, book_id: str,
                     book: str | os.PathLike[str] | bytes | Mapping[str, Any]
                     ) -> AppendResult:
        """Create or replace the lorebook ``book_id`` of ``scope`` (one ``lorebook.set``).

        ``book`` is a lorebook file (path or bytes) or its parsed JSON: a V2
        ``character_book``, a ``lorebook_v3`` file, or a SillyTavern world-info export
        (converted: ``ctxledger.io._card_files.world_info_book``). Each entry that
        cannot work as written (a regex key RE2 refuses...) is named in a
        ``LorebookWarning`` once the book is stored."""
        from ctxledger.io._card_files import read_lorebook

        data = {"book_id": book_id, "book": read_lorebook(book)}
        result = self.append(_card_stream(None, scope),
                             {"type": "lorebook.set", "data": data})
        _warn_lorebook(result)
        return result

    def remove_lorebook(self, scope: str, book_id: str) -> AppendResult:
        """Remove the lorebook ``book_id`` of ``scope`` (one ``lorebook.removed``); a book
        the scope does not have raises ``InvalidArgument``, writing nothing."""
        from ctxledger.projections.view_loader import load_lorebooks

        with self.log.connection() as conn:
            books = [found.book_id for found in load_lorebooks(conn, scope)]
        if book_id not in books:
            raise InvalidArgument(f"scope {scope!r} has no lorebook {book_id!r}")
        return self.append(_card_stream(None, scope),
                           {"type": "lorebook.removed", "data": {"book_id": book_id}})

    # -- assembling -----------------------------------------------------------------------

    def assemble(self, session: str, profile: str | None = None, *, now: datetime | None = None,
                 policy: Policy | Mapping[str, Any] | str | None = None,
                 starting_in: str | None = None) -> Assembly:
        """Build the context of ``session`` with ``profile`` (card, session, ...): by
        default the one the session's ``profile`` setting names, else ``card``
        (``profile_of``).

        ``now`` defaults to the ledger's clock. ``policy`` replaces the policy the
        session's settings give (a ``Policy``, its JSON data, or JSON text). Reads one
        snapshot of the projections holding every event up to its position (never one
        an append still in flight would change), so a replay up to the assembly's
        position gives its digest; token counts and caches computed on the way are
        saved afterwards, so the next assembly only counts what changed. Safe to call
        from several threads at once. ``starting_in`` names the scope a session that has
        not started would start in: it is assembled as a new session there (a project's
        session-start context), writing nothing.
        """
        from ctxledger._token_store import TableTokenStore
        from ctxledger.assembler import Policy
        from ctxledger.assembler.api import (
            assemble_with_caches,
            parse_policy,
            policy_for,
            request_for,
        )
        from ctxledger.assembler.setting_check import choose_profile

        when = check_time(now if now is not None else self.clock(), "now")
        with self.log.connection() as conn, prefix_snapshot(conn):
            settings = load_session_view(conn, session, ViewRequest(card=False),
                                         starting_in=starting_in).settings
            profile = choose_profile(profile, settings).name
            chosen = (policy_for(profile, settings) if policy is None
                      else policy if isinstance(policy, Policy) else parse_policy(policy))
            counter = self._counter(chosen.token_encoding, chosen.text_unit)
            counter.attach(TableTokenStore(conn))
            try:
                with self._memos().lease(session) as memos:
                    view = load_session_view(
                        conn, session, request_for(profile, chosen, when, counter, memos),
                        starting_in=starting_in)
                    result, caches = assemble_with_caches(view, profile, when, chosen,
                                                          counter, memos)
            finally:
                counter.attach(None)
            new_counts = counter.new_counts()
            counter.mark_persisted()
        if (new_counts or caches) and not self.read_only:
            self._save_caches(new_counts, caches)
        return result.with_message_seqs(self._message_seqs(session, result.position))

    def context(self, session: str, profile: str | None = None, *, agent: str | None = None,
                now: datetime | None = None,
                policy: Policy | Mapping[str, Any] | str | None = None,
                starting_in: str | None = None, default: str = "card") -> AgentContext:
        """``assemble``, and with ``agent`` the session's state scoped by that agent's
        manifest at the assembly's ``now`` (``ctxledger._agent_context``): what every
        surface means by a context for an agent. ``default``: the profile when neither
        ``profile`` nor the session's setting names one (``profile_of``). An empty agent
        name raises ``InvalidArgument``."""
        from ctxledger._agent_context import AgentContext

        if agent is not None and not agent.strip():
            raise InvalidArgument("agent must not be empty")
        if profile is None:
            profile = self.profile_of(session, None, default=default,
                                      starting_in=starting_in).name
        assembly = self.assemble(session, profile, now=now, policy=policy,
                                 starting_in=starting_in)
        state = None if agent is None else self.state(
            session, now=assembly.now, agent=agent, starting_in=starting_in)
        return AgentContext(session, assembly, agent, state)

    def _message_seqs(self, session: str, position: int) -> Callable[[str], int | None]:
        """The lookup ``Assembly.decision`` places a message with: the session's stream up
        to ``position`` is read once, at the first message it asks about."""
        from ctxledger._message_index import MessageIndex

        found: list[MessageIndex] = []

        def seq(message_id: str) -> int | None:
            if not found:
                found.append(MessageIndex(session, self.events(session, until=position)))
            return found[0].seq_at(message_id, position)
        return seq

    def tokenizer_calls(self) -> int:
        """Texts this thread's assemblies had to tokenize (found in no cache) so far.

        Re-assembling after one new message should add exactly one.
        """
        counters: dict[str, TokenCounter] = getattr(self._local, "counters", {})
        return sum(counter.calls for counter in counters.values())

    def _memos(self) -> SessionMemos:
        # What a profile memoizes between assemblies: one set per ledger, each assembly
        # leasing its session's (``SessionMemos.lease``), so a session's memos follow it
        # from thread to thread (a service's worker threads take turns; per thread, each
        # would miss what the others assembled).
        from ctxledger.assembler.memo import SessionMemos

        with self._memos_lock:
            if self._session_memos is None:
                self._session_memos = SessionMemos()
            return self._session_memos

    def _counter(self, encoding: str, unit: LengthUnit) -> TokenCounter:
        from ctxledger.assembler import TokenCounter
        from ctxledger.assembler.tokens import counter_key

        counters: dict[str, TokenCounter] | None = getattr(self._local, "counters", None)
        if counters is None:
            counters = self._local.counters = {}
        key = counter_key(encoding, unit)
        counter = counters.get(key)
        if counter is None or counter.cached > _COUNTER_MEMO_LIMIT:
            counter = counters[key] = TokenCounter(encoding, unit=unit)
        return counter

    def _save_caches(self, counts: Sequence[Any], caches: Sequence[CacheWrite]) -> None:
        # A cache write failing (e.g. the database is busy) must not fail the assembly the
        # caller already has: the next assembly computes the same numbers again.
        from ctxledger._token_store import save_cache_writes
        from ctxledger.projections.token_cache import store_counts

        try:
            with self.log.transaction() as conn:
                store_counts(conn, counts)
                save_cache_writes(conn, caches)
        except sa.exc.OperationalError as exc:
            _log.warning("token caches not saved (%s); the next assembly recounts",
                         str(exc).splitlines()[0])

    def record_assembly(self, session: str, assembly: Assembly,
                        policy: Policy | Mapping[str, Any] | str | None = None, *,
                        event_id: str | None = None) -> AppendResult:
        """Append ``context.assembled`` for an assembly the app sent, for later audit.

        The policy's data is stored with it, so an audit re-derives even a custom policy:
        pass the policy the assembly was made with; without one, the policy the session's
        settings give now is stored if its version is the assembly's. ``event_id`` makes
        recording the same assembly twice idempotent.
        """
        from ctxledger.timetravel._audit import recorded_policy

        data: dict[str, Any] = {
            "profile": assembly.profile, "policy_version": assembly.policy_version,
            "position": assembly.position, "now": format_utc(assembly.now),
            "digest": assembly.digest, "tokens": assembly.tokens.total,
            "format_version": assembly.format_version}
        chosen = _as_policy(policy) if policy is not None else self._settings_policy(
            session, assembly.profile)
        stored = recorded_policy(assembly, chosen)
        if stored is not None:
            data["policy"] = stored
        event: dict[str, Any] = {"type": "context.assembled", "data": data}
        if event_id is not None:
            event["id"] = event_id
        result = self.append(session, event)
        self._remember_record(session, assembly, result)
        return result

    def _remember_record(self, session: str, assembly: Assembly,
                         result: AppendResult) -> None:
        # What report_usage looks up after the call, kept so it needs no query.
        from ctxledger._billing import RecordRef

        recorded: dict[tuple[str, str | int], RecordRef] | None = getattr(
            self._local, "recorded", None)
        if recorded is None or len(recorded) >= _RECORDED_LIMIT:
            recorded = self._local.recorded = {}
        if result.positions and not result.duplicate:
            ref = RecordRef(result.positions[-1], assembly.digest)
            recorded[(session, assembly.digest)] = ref
            recorded[(session, assembly.position)] = ref

    def report_usage(self, session: str, *, model: str, input_tokens: int,
                     output_tokens: int, cached_tokens: int = 0, cost: float | None = None,
                     assembly: Assembly | str | int | None = None,
                     event_id: str | None = None) -> AppendResult:
        """Append ``usage.reported``: what the provider billed for one call of ``session``.

        ``input_tokens`` counts every prompt token, cached ones included (``cached_tokens``
        of them read from the provider's cache); ``cost`` is the call's price. ``assembly``
        (the ``Assembly`` sent, its digest, or its position) ties the report to that
        assembly's ``context.assembled`` record, so the audit shows the billed tokens
        beside the predicted ones; a session that recorded no such assembly raises
        ``InvalidArgument`` and nothing is written. ``event_id`` makes a retry idempotent.
        """
        from ctxledger._billing import USAGE_TYPE, find_record, reference, usage_data

        record = None
        if assembly is not None:
            recorded = getattr(self._local, "recorded", {})
            record = recorded.get((session, reference(assembly)))
        if record is None:
            with self.log.connection() as conn:
                if load_session_scope(conn, session) is None \
                        and self.log.stream_version(session) == 0:
                    raise InvalidArgument(f"unknown session {session!r}")
                if assembly is not None:
                    record = find_record(conn, session, assembly)
        event: dict[str, Any] = {"type": USAGE_TYPE, "data": usage_data(
            model=model, input_tokens=input_tokens, output_tokens=output_tokens,
            cached_tokens=cached_tokens, cost=cost, record=record)}
        if event_id is not None:
            event["id"] = event_id
        return self.append(session, event)

    def policy(self, session: str, profile: str | None = None) -> Policy:
        """The policy ``session``'s settings give ``profile`` now: what ``assemble`` uses
        when no policy is passed (a what-if starts from it); ``profile`` as ``profile_of``."""
        from ctxledger.assembler.api import policy_for
        from ctxledger.assembler.setting_check import choose_profile

        settings = self.view(session, ViewRequest(card=False)).settings
        return policy_for(choose_profile(profile, settings).name, settings)

    def profile_of(self, session: str, profile: str | None = None, *,
                   default: str | None = "card",
                   starting_in: str | None = None) -> ProfileChoice:
        """The profile an assembly of ``session`` uses, and where it comes from: the one
        given, else the session's ``profile`` setting (its own or its scope's, at the
        head), else ``default`` (``None``: none is an error). Every method that takes a
        ``profile`` resolves it here; an unknown name, or a setting naming no profile,
        raises a one-line ``LedgerError``."""
        from ctxledger.assembler.setting_check import choose_profile

        with self.log.connection() as conn:
            settings = load_session_view(conn, session, ViewRequest(card=False),
                                         starting_in=starting_in).settings
        return choose_profile(profile, settings, default)

    def _settings_policy(self, session: str, profile: str) -> Policy | None:
        from ctxledger.assembler.api import policy_for

        try:
            return policy_for(profile, self.view(session).settings)
        except LedgerError:
            return None  # a setting no longer gives a valid policy: store none

    # -- replay, why, audit, fork (SPEC §4) -------------------------------------------------

    def replay(self, session: str, until: int | datetime | None = None, *,
               profile: str | None = None, policy: Policy | Mapping[str, Any] | str | None = None,
               now: datetime | None = None) -> Assembly:
        """The assembly of ``session`` derived again from the log prefix ending at ``until``
        (a position, a time, or the head), in a scratch store; live tables are untouched.

        ``now`` defaults to the ``recorded_at`` of the prefix's last event, ``policy`` to
        the one the prefix's settings give.
        """
        from ctxledger.timetravel import _replay

        name = self.profile_of(session, profile).name
        with self.log.connection() as conn, read_snapshot(conn):
            return _replay.replay(conn, session, profile=name, until=until,
                                  policy=_as_policy(policy), now=now,
                                  clock_now=self.clock())

    def timeline(self, session: str, *, profile: str | None = None,
                 until: int | datetime | None = None,
                 policy: Policy | Mapping[str, Any] | str | None = None,
                 progress: Progress | None = None,
                 only: range | None = None,
                 cancel: CancelToken | None = None) -> list[TimelineStep]:
        """The assembly after each message of ``session`` (folded once, assembled per step);
        ``only``: just these step numbers (1-based), the fold still reading every event.
        Every step's whole assembly is kept: a long session is read with
        ``iter_timeline``."""
        return list(self.iter_timeline(session, profile=profile, until=until, policy=policy,
                                       progress=progress, only=only, cancel=cancel))

    def iter_timeline(self, session: str, *, profile: str | None = None,
                      until: int | datetime | None = None,
                      policy: Policy | Mapping[str, Any] | str | None = None,
                      progress: Progress | None = None,
                      only: range | None = None,
                      cancel: CancelToken | None = None
                  ) -> Generator[TimelineStep, None, None]:
        """``timeline``'s steps one at a time, as they are computed: nothing of a step is
        kept once the next is made. ``cancel`` is checked at every step of the fold
        (``Cancelled`` once tripped). Close the iterator to stop early: it holds a
        connection until then."""
        from ctxledger.timetravel import _replay

        chosen = _as_policy(policy)
        name = self.profile_of(session, profile).name
        with self.log.connection() as conn, read_snapshot(conn):
            yield from _replay.iter_timeline(
                conn, session, profile=name, until=until, policy=chosen,
                clock_now=self.clock(), progress=progress, only=only, cancel=cancel)

    def timeline_length(self, session: str, *, profile: str | None = None,
                        until: int | datetime | None = None) -> int:
        """How many steps ``timeline`` has: reads the events, folds and assembles nothing."""
        from ctxledger.timetravel import _replay

        name = self.profile_of(session, profile).name
        with self.log.connection() as conn, read_snapshot(conn):
            return _replay.timeline_length(conn, session, profile=name, until=until,
                                           clock_now=self.clock())

    def timeline_chart(self, session: str, *, profile: str | None = None,
                       until: int | datetime | None = None,
                       steps: range | None = None,
                       cancel: CancelToken | None = None) -> TimelineChart:
        """The timeline reduced to its chart: tokens per section at each step (one fold,
        as ``timeline``), and markers where a field expired, a summary landed or a
        lorebook entry fired. ``steps``: only these step numbers (each step is an
        assembly; a long session's chart is drawn a window at a time)."""
        from ctxledger.timetravel._markers import timeline_chart

        profile = self.profile_of(session, profile).name
        total = self.timeline_length(session, profile=profile, until=until)
        # The step before a window too: its markers compare with it.
        before = None if steps is None else range(max(steps.start - 1, 1), steps.stop)
        with closing(self.iter_timeline(session, profile=profile, until=until, only=before,
                                        cancel=cancel)) as found:
            return timeline_chart(found, total, first=1 if steps is None else steps.start)

    def why(self, session: str, item: str, *, profile: str | None = None,
            until: int | datetime | None = None,
            policy: Policy | Mapping[str, Any] | str | None = None,
            cancel: CancelToken | None = None) -> WhyReport:
        """``item``'s decisions across the session's timeline, collapsed into runs. The
        timeline is read step by step: only the item's decisions are kept."""
        from ctxledger.assembler.policy import PolicyError
        from ctxledger.timetravel._why import WhyError, explain_item

        profile = self.profile_of(session, profile).name
        try:
            events = self.events(session, until=until)
        except LedgerError:
            events = []  # a bad ``until``: the timeline names it, as it always did
        try:
            with closing(self.iter_timeline(session, profile=profile, until=until,
                                            policy=policy, cancel=cancel)) as steps:
                return explain_item(session, item, profile, steps, events)
        except WhyError:
            if policy is not None:
                raise
            # No step assembled the item. If the settings as of ``until`` (say, one an
            # older release stored unchecked) make the assembly fail, that is the cause.
            try:
                self.replay(session, until, profile=profile)
            except PolicyError as exc:
                raise exc from None
            raise

    def audit(self, session: str | None = None, *,
              cancel: CancelToken | None = None) -> AuditReport:
        """Derive every recorded ``context.assembled`` again (one session's, or all) and
        say whether each digest and policy still match. ``cancel`` is checked before
        each record."""
        from ctxledger.timetravel._audit import audit_log

        with self.log.connection() as conn, read_snapshot(conn):
            return audit_log(conn, session, clock_now=self.clock(), cancel=cancel)

    def what_if(self, session: str, policy: Policy | Mapping[str, Any] | str, *,
                profile: str | None = None, until: int | datetime | None = None,
                cancel: CancelToken | None = None) -> WhatIfReport:
        """The decisions that change when ``session``'s timeline is replayed under
        ``policy``: one fold, each step assembled under both policies, so memory holds
        one pair of assemblies (and the changes) whatever the session's length.
        ``cancel`` is checked at every step."""
        from ctxledger.timetravel import _replay
        from ctxledger.timetravel._audit import compare_timelines

        chosen = _as_policy(policy)
        assert chosen is not None
        name = self.profile_of(session, profile or chosen.profile).name
        with self.log.connection() as conn, read_snapshot(conn):
            return compare_timelines(session, name, _replay.iter_timeline_pairs(
                conn, session, profile=name, until=until, policies=(None, chosen),
                clock_now=self.clock(), cancel=cancel))

    def fork(self, session: str, new_session: str, at: int, *,
             count: bool = False) -> AppendResult:
        """Copy ``session``'s events up to position ``at`` into the new stream
        ``new_session``, in one transaction: new ids, the original ``recorded_at``;
        ``causation_id``, ``forked_from`` and the fork's time in the metadata.

        The copies count toward the scope's usage (tool usage, observations, ended
        sessions, rollups) only with ``count=True``; events appended to the fork later
        always do (``ctxledger.timetravel._fork``)."""
        from ctxledger.store.streams import check_stream_id
        from ctxledger.timetravel._fork import ForkError, check_fork_streams, fork_events

        check_stream_id(new_session)  # before any query: PostgreSQL fails on a NUL
        check_fork_streams(session, new_session)
        # Everything about the source and the point first: only a fork that would be made
        # learns whether the new id is taken.
        copies = fork_events(self.events(session), session, new_session, at,
                             head=self.head(), fork_time=self.clock(), count=count)
        if self.log.stream_version(new_session) > 0:
            raise ForkError(f"stream {new_session!r} already exists: fork onto a new one")
        positions: list[int] = []
        version = 0
        with self.log.transaction() as conn:
            # A batch has one recorded_at: one append per run of copies of one time.
            for when, run in groupby(copies, key=lambda copy: copy.recorded_at):
                done = self.log.append_in(conn, new_session, [c.event for c in run],
                                          expected_version=version, recorded_at=when)
                positions.extend(done.positions)
                version = done.stream_version
        return AppendResult(positions=tuple(positions), stream_version=version,
                            duplicate=False)

    # -- erasure ------------------------------------------------------------------------

    def erase(self, *, session: str | None = None, scope: str | None = None,
              reason: str, progress: Progress | None = None) -> ErasureReport:
        """Make the content of every event of ``session`` (or of ``scope``: its own stream
        and every session that joined it), and of every session forked from them,
        unrecoverable from the database files, keeping
        every chain, seal and anchor verifiable (docs/erasure.md).

        In one transaction: an ``erasure.completed`` record (what, when, ``reason``; no
        content) is appended to the ``system`` stream, the events are blanked to
        ``event.erased`` tombstones, the token caches emptied and each projection
        forgets the erased streams' rows (O(the erased events), not O(the log)); then
        the tables written are scrubbed (SQLite: secure_delete and the WAL checkpointed
        and truncated; PostgreSQL: each rewritten, online with pg_repack where its
        extension is installed, else by VACUUM FULL, which holds the table meanwhile).
        An unknown session or scope, or no reason, raises ``InvalidArgument`` and
        writes nothing; so does a ``CTXLEDGER_PG_REPACK`` that cannot run. Erasing again
        erases nothing (0 events) and scrubs again.
        """
        from ctxledger._erase import erase

        try:
            return erase(self.log, self.runner, self.clock, session=session, scope=scope,
                         reason=reason, progress=progress)
        finally:
            self.forget_memos()

    def forget_memos(self) -> None:
        """Drop every thread's in-memory token counts and the ledger's assembly memos
        (they hold the texts counted and assembled: an erasure must not leave them behind
        in any thread of a service)."""
        # A new thread-local store: every thread's next read finds it empty, and the old
        # one, with each thread's counters, goes when the last call using it returns.
        self._local = threading.local()
        with self._memos_lock:
            if self._session_memos is not None:
                self._session_memos.clear()

    # -- maintenance --------------------------------------------------------------------

    def projection_status(self) -> list[ProjectionStatus]:
        """Every projection's version and checkpoint against the head."""
        with self.log.connection() as conn:
            return self.runner.status(conn)

    def refresh_projections(self, progress: Progress | None = None) -> list[str]:
        """Rebuild changed projections and catch up lagging ones; returns those rebuilt."""
        with self.log.transaction() as conn:
            return self.runner.bring_up_to_date(conn, progress=progress)

    def rebuild(self, projection: str | None = None,
                progress: Progress | None = None) -> list[str]:
        """Rebuild one projection (or all) from the log, in one transaction."""
        known = [p.name for p in self.runner.projections]
        if projection is not None and projection not in known:
            raise LedgerError(
                f"unknown projection {projection!r}; known: {', '.join(sorted(known))}")
        names = [projection] if projection else known
        with self.log.transaction() as conn:
            return self.runner.bring_up_to_date(conn, progress=progress, force=names)

    def rollup(self, now: datetime | None = None, *,
               policy: RollupPolicy | None = None) -> RollupReport:
        """Roll up every complete UTC day before ``now`` (default: the clock) not rolled up
        yet, oldest first, roll up again the days that received events since, and prune
        old raw tool-usage rows (SPEC §5; ``ctxledger.jobs._rollup``). Running it again changes
        nothing. ``now`` later than the clock, or before the first event, raises
        ``LedgerError``."""
        from ctxledger.jobs._rollup import run_rollup

        return run_rollup(self.log, self.clock, now=now, policy=policy)

    def usage(self, scope: str, *, days: int = DEFAULT_USAGE_DAYS,
              now: datetime | None = None) -> UsageReport:
        """Daily message, tool and token figures of ``scope`` over the last ``days`` days up
        to ``now``: rolled-up days from the rollups, the rest (today) from raw rows."""
        from ctxledger.jobs._usage import usage_report

        return usage_report(self.log, self.clock, scope, days=days, now=now)

    def seal(self) -> Seal | None:
        """Seal the log up to its head (None when nothing is new); see ``store.seal``."""
        return self.log.seal()

    def anchor(self) -> Anchor:
        """Seal, then return the last seal; keep ``anchor.line()`` outside the database."""
        return self.log.anchor()

    def verify(self, progress: Callable[[int], None] | None = None, *,
               anchor: Anchor | str | None = None, deep: bool = False) -> VerifyReport:
        """Check every hash chain, every seal, the immutability triggers, that no
        projection has seen or still counts events the log no longer holds
        (``projections.cut_evidence``), and the log against every head its witness holds.
        An erased event (``erase``) is proven by the ``erasure.completed`` record that
        lists it.

        ``anchor`` (an ``Anchor``, its line, or a file holding it) also proves that the log
        still extends it. ``deep`` also rebuilds the projections in a scratch store and
        compares them table by table with the live ones."""
        if isinstance(anchor, str):
            anchor = read_anchor(anchor)
        report = self.log.verify(progress=progress, anchor=anchor)
        for status in self.projection_status():
            if status.position > status.head:
                report.problems.append(
                    f"projection {status.name} is at position {status.position} but the log "
                    f"ends at {status.head}: events were removed")
        from ctxledger.projections.cut_evidence import cut_evidence

        with self.log.connection() as conn, read_snapshot(conn):
            report.problems.extend(cut_evidence(conn, self.runner.projections))
        if deep:
            from ctxledger._deep_verify import compare_with_rebuild

            found = compare_with_rebuild(self.log, self.runner.projections, self.clock)
            report.deep = "differs" if found else "ok"
            report.problems.extend(found)
        return report


def _as_policy(policy: Policy | Mapping[str, Any] | str | None) -> Policy | None:
    """A policy given as a ``Policy``, its JSON data or JSON text (None stays None)."""
    from ctxledger.assembler import Policy
    from ctxledger.assembler.api import parse_policy

    if policy is None or isinstance(policy, Policy):
        return policy
    return parse_policy(policy)


def _card_stream(session: str | None, scope: str | None) -> str:
    """The stream a card call names: the session's, or ``scope:<scope>``; exactly one."""
    from ctxledger.store.streams import SCOPE_PREFIX

    if (session is None) == (scope is None):
        raise InvalidArgument("give exactly one of session and scope")
    return session if session is not None else SCOPE_PREFIX + str(scope)


def _warn_lorebook(result: AppendResult) -> None:
    """A ``LorebookWarning`` per line of ``result.warnings`` (the caller's caller is the
    one who imported the book)."""
    import warnings

    from ctxledger.assembler.lorebook import LorebookWarning

    for line in result.warnings:
        warnings.warn(line, LorebookWarning, stacklevel=3)


_BOOK_EVENTS = frozenset({"card.set", "lorebook.set"})
"""``_lorebook_import.BOOK_EVENTS``, here so an append of other events imports nothing."""


def _event_type(event: EventInput) -> object:
    return event.type if isinstance(event, NewEvent) else event.get("type")


def _live_messages(conn: sa.Connection, session: str, last: int | None
                   ) -> list[RecordedEvent]:
    """The messages of ``session`` that still count (the newest ``last``), read on ``conn``."""
    from ctxledger._message_list import events_at
    from ctxledger.projections.read_history import live_message_seqs

    return list(events_at(conn, session, tuple(live_message_seqs(conn, session, last))))


def _setting_key(event: EventInput) -> str | None:
    """The key a ``setting.changed`` sets (the append has validated it), else None."""
    if _event_type(event) != "setting.changed":
        return None
    data = event.data if isinstance(event, NewEvent) else event.get("data")
    key = data.get("key") if isinstance(data, Mapping) else None
    return key if isinstance(key, str) else None
