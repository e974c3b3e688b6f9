"""Load a ``SessionView`` (plain data) from the projection tables.

Every query is a primary-key or index seek, so loading costs O(log n) per section plus
the rows returned: it never grows with the length of the history otherwise. The whole
load reads one snapshot (one transaction; REPEATABLE READ on PostgreSQL).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, nullcontext
from typing import Any

import orjson
import sqlalchemy as sa

from ctxledger.projections.card import card_fields
from ctxledger.projections.checkpoints import checkpoints
from ctxledger.projections.context_items import FLAGS, context_items
from ctxledger.projections.documents import documents
from ctxledger.projections.knowledge import (
    knowledge_entities,
    knowledge_snippets,
    knowledge_sources,
    personas,
)
from ctxledger.projections.lorebooks import scope_lorebooks
from ctxledger.projections.observations import observations
from ctxledger.projections.read_history import load_history
from ctxledger.projections.registry import builtin_names
from ctxledger.projections.session_stats import ROLES, sessions
from ctxledger.projections.session_view import (
    Document,
    Entity,
    EntityFact,
    History,
    Item,
    ItemSet,
    ItemsProbe,
    MessageCounts,
    Observation,
    Persona,
    PreviousSession,
    ScopeLorebook,
    SessionView,
    Snippet,
    SnippetBase,
    SnippetProbe,
    Source,
    Tool,
    ViewRequest,
)
from ctxledger.projections.settings import scope_settings, session_settings
from ctxledger.projections.tool_registry import scope_tools
from ctxledger.projections.tool_usage import load_tool_usage
from ctxledger.projections.tool_window import window_bounds
from ctxledger.store.backends import backend_for
from ctxledger.store.character_card import REPLACE, lorebook_data
from ctxledger.store.errors import LedgerError
from ctxledger.store.read import head_position
from ctxledger.store.schema import events
from ctxledger.store.sql_engine import DriverStatement, driver_statement
from ctxledger.store.streams import DEFAULT_SCOPE, SCOPE_PREFIX

Row = Mapping[str, Any]


def _prebuilt(conn: sa.Connection, name: str, build: Callable[[], sa.Select[Any]]
              ) -> DriverStatement:
    """The read view's statement ``name``, compiled once per dialect. A view is loaded at
    every assembly and every step of a timeline, and building and running these index
    seeks through SQLAlchemy's per-call machinery cost more than the seeks."""
    return driver_statement(conn.dialect, ("view", name), build)


def _session_row() -> sa.Select[Any]:
    return sa.select(sessions).where(sessions.c.stream_id == sa.bindparam("stream_id"))


def _scope_settings() -> sa.Select[Any]:
    return sa.select(scope_settings.c.key, scope_settings.c.value).where(
        scope_settings.c.scope == sa.bindparam("scope"))


def _session_settings() -> sa.Select[Any]:
    return sa.select(session_settings.c.key, session_settings.c.value).where(
        session_settings.c.stream_id == sa.bindparam("stream_id"))


def _card_rows() -> sa.Select[Any]:
    return sa.select(card_fields.c.stream_id, card_fields.c.field, card_fields.c.value).where(
        card_fields.c.stream_id.in_([sa.bindparam("scope_stream"), sa.bindparam("stream_id")]))


def _lorebook_rows() -> sa.Select[Any]:
    return sa.select(scope_lorebooks).where(scope_lorebooks.c.scope == sa.bindparam("scope"))


@contextmanager
def read_snapshot(conn: sa.Connection) -> Iterator[None]:
    """Run the enclosed queries against one snapshot of the database.

    A connection already in a transaction is used as it is (the caller chose what it
    sees). Otherwise a read-only transaction is opened; on PostgreSQL it is REPEATABLE
    READ, because READ COMMITTED would let an append land between two queries.
    """
    if conn.in_transaction():
        yield
        return
    with conn.begin():
        backend_for(conn).begin_read_snapshot(conn)
        yield


PREFIX_TRIES = 4
"""Snapshots tried before ``prefix_snapshot`` holds appends back to take one."""
PREFIX_WAIT = 30.0
"""Seconds ``prefix_snapshot`` keeps trying where holding appends back cannot help (a
hot standby: the appends in flight run on the primary) before it gives up."""
_PREFIX_PAUSE = 0.002  # seconds, times the try: an append in flight commits in about that


@contextmanager
def prefix_snapshot(conn: sa.Connection) -> Iterator[None]:
    """As ``read_snapshot``, and the snapshot holds every event below its head.

    Where appends commit out of position order (PostgreSQL), a snapshot can hold a
    position while an append with an earlier one is still in flight: an assembly read
    from it would name a position whose replay differs. A snapshot with such a gap is
    dropped and taken again; after ``PREFIX_TRIES`` of them, new appends wait while the
    ones in flight end and the snapshot is taken (a moment, not the whole read). On a
    hot standby that wait holds nothing back, so the tries go on until the replayed log
    has a snapshot without a gap (at most ``PREFIX_WAIT`` seconds).
    """
    if conn.in_transaction():
        yield
        return
    backend = backend_for(conn)
    deadline = time.monotonic() + PREFIX_WAIT
    while True:
        for attempt in range(PREFIX_TRIES):
            with conn.begin():
                backend.begin_read_snapshot(conn)
                if backend.snapshot_is_prefix(conn):
                    yield
                    return
            time.sleep(_PREFIX_PAUSE * (attempt + 1))
        with backend.appends_drained(conn.engine) as release, conn.begin():
            backend.begin_read_snapshot(conn)
            whole = backend.snapshot_is_prefix(conn)  # the first query pins the snapshot
            release()
            if whole:  # always, where the appends in flight were held back
                yield
                return
        if time.monotonic() > deadline:
            raise LedgerError(
                f"no snapshot without an append in flight below its head within"
                f" {PREFIX_WAIT:g} s (a standby whose primary keeps a transaction open?);"
                " try again, or on the primary")


def _scope_of() -> sa.Select[Any]:
    return sa.select(sessions.c.scope).where(sessions.c.stream_id == sa.bindparam("stream_id"))


def load_session_scope(conn: sa.Connection, stream_id: str) -> str | None:
    """The scope of session ``stream_id``, or None when there is no such session (one
    primary-key read: what a scope check needs, without a view; the service makes it on
    every request)."""
    # One statement: any transaction will do, no snapshot to pin.
    with nullcontext() if conn.in_transaction() else conn.begin():
        found = _prebuilt(conn, "scope_of", _scope_of).fetch(conn, {"stream_id": stream_id})
    return str(found[0][0]) if found else None


def load_session_view(conn: sa.Connection, stream_id: str, request: ViewRequest, *,
                      starting_in: str | None = None) -> SessionView:
    """A snapshot of ``stream_id``'s projections, with the sections ``request`` asks for.

    An unknown session gives ``exists=False`` in scope ``default`` (scope-wide sections,
    such as settings defaults, tools and observations, are still loaded). With
    ``starting_in``, an unknown session is read as one that has just started in that
    scope, with nothing of its own yet (``exists=True``): what a new session there sees.
    """
    window = window_bounds(request.now, request.usage_window)
    with read_snapshot(conn):
        found = _prebuilt(conn, "session", _session_row).fetch_dicts(
            conn, {"stream_id": stream_id})
        session = found[0] if found else None
        scope = (str(session["scope"]) if session is not None
                 else starting_in if starting_in is not None else DEFAULT_SCOPE)
        settings, sources = load_settings(conn, stream_id, scope)
        load_usage = request.tools or window is not None
        head = since = None
        snippets: tuple[Snippet, ...] = ()
        if request.knowledge:
            head, since, snippets = load_snippet_set(conn, scope, request.snippet_probe)
        item_set = (load_item_set(conn, stream_id, request.items_probe) if request.items
                    else None)
        return SessionView(
            stream_id=stream_id,
            scope=scope,
            position=load_position(conn),
            exists=session is not None or starting_in is not None,
            title=None if session is None else session["title"],
            agent=None if session is None else session["agent"],
            started_at=None if session is None else session["started_at"],
            ended_at=None if session is None else session["ended_at"],
            last_activity=None if session is None else session["last_activity"],
            counts=_counts(session),
            chapter=None if session is None else session["chapter"],
            scene=None if session is None else session["scene"],
            settings=settings,
            setting_sources=sources,
            card=load_card(conn, stream_id, scope) if request.card else {},
            lorebooks=load_lorebooks(conn, scope) if request.lorebooks else (),
            history=(None if request.history == "none" else
                     load_history(conn, session, request) if session is not None else
                     History(summary=None, messages=(), complete=True, summarized_count=0)),
            tools=load_tools(conn, scope) if request.tools else (),
            tool_usage=load_tool_usage(conn, scope, window) if load_usage else (),
            usage_window=window,
            observations=load_observations(conn, scope, request.observations),
            previous_session=(load_previous_session(conn, scope, stream_id)
                              if request.previous_session else None),
            items=() if item_set is None else item_set.items,
            item_set=item_set,
            documents=load_documents(conn, stream_id) if request.documents else (),
            sources=load_sources(conn, scope) if request.knowledge else (),
            snippets=snippets,
            entities=load_entities(conn, scope) if request.knowledge else (),
            persona=load_persona(conn, stream_id) if request.knowledge else None,
            snippet_head=head,
            snippets_since=since,
            ended_sessions=load_ended_sessions(conn, scope, stream_id,
                                               request.ended_sessions),
        )


def load_position(conn: sa.Connection) -> int:
    """The position every built-in projection has reached (0 if one was never built)."""
    names = builtin_names()
    found = driver_statement(
        conn.dialect, ("view", "position", names),
        lambda: sa.select(checkpoints.c.position, checkpoints.c.inline)
        .where(checkpoints.c.name.in_(names))).fetch(conn)
    if len(found) < len(names):
        return 0
    behind = [int(position) for position, inline in found if not inline]
    # Inline projections commit with the events: they are at the head.
    return min(behind) if behind else head_position(conn)


def _counts(session: Row | None) -> MessageCounts:
    if session is None:
        return MessageCounts()
    by_role = {role: int(session[f"messages_{role}"]) for role in ROLES}
    return MessageCounts(**by_role, total=int(session["messages_total"]),
                         retracted=int(session["messages_retracted"]))


def load_settings(conn: sa.Connection, stream_id: str,
                  scope: str) -> tuple[dict[str, Any], dict[str, str]]:
    """Resolved settings (session over scope) and where each came from, in key order."""
    resolved: dict[str, tuple[str, str]] = {}
    for key, value in _prebuilt(conn, "scope_settings", _scope_settings).fetch(
            conn, {"scope": scope}):
        resolved[key] = (value, "scope")
    for key, value in _prebuilt(conn, "session_settings", _session_settings).fetch(
            conn, {"stream_id": stream_id}):
        resolved[key] = (value, "session")
    keys = sorted(resolved)
    return ({k: json.loads(resolved[k][0]) for k in keys}, {k: resolved[k][1] for k in keys})


def load_card(conn: sa.Connection, stream_id: str, scope: str) -> dict[str, Any]:
    """The session's card fields, in field-name order: the scope's card with the
    session's own fields over it; a session's whole card (``replace``) hides the
    scope's."""
    rows = _prebuilt(conn, "card", _card_rows).fetch(
        conn, {"scope_stream": SCOPE_PREFIX + scope, "stream_id": stream_id})
    own = {field: value for stream, field, value in rows if stream == stream_id}
    fields = {} if own.get(REPLACE) == "true" else {
        field: value for stream, field, value in rows if stream != stream_id}
    fields.update(own)
    # Sorted here: PostgreSQL orders text by collation, SQLite by bytes.
    # orjson: a card's lorebook can be hundreds of kilobytes, read at every assembly.
    return {name: orjson.loads(fields[name]) for name in sorted(fields)}


def load_lorebooks(conn: sa.Connection, scope: str) -> tuple[ScopeLorebook, ...]:
    """The scope's lorebooks by book id, each as written (a ``lorebook_v3`` file's
    ``data``)."""
    rows = _prebuilt(conn, "lorebooks", _lorebook_rows).fetch_dicts(conn, {"scope": scope})
    return tuple(ScopeLorebook(book_id=row["book_id"],
                               book=lorebook_data(orjson.loads(row["book"])),
                               position=row["position"])
                 for row in sorted(rows, key=lambda row: str(row["book_id"])))


# -- tools --------------------------------------------------------------------------------

def load_tools(conn: sa.Connection, scope: str) -> tuple[Tool, ...]:
    """The scope's registered tools, by name."""
    rows = _prebuilt(conn, "tools", lambda: sa.select(scope_tools).where(
        scope_tools.c.scope == sa.bindparam("scope")).order_by(scope_tools.c.name)
    ).fetch_dicts(conn, {"scope": scope})
    return tuple(sorted((Tool(name=r["name"], tool_type=r["tool_type"],
                              server_name=r["server_name"], description=r["description"],
                              position=int(r["position"])) for r in rows),
                        key=lambda tool: tool.name))


# -- scope-wide sections ------------------------------------------------------------------

def session_lineage(conn: sa.Connection, stream_id: str) -> list[str]:
    """``stream_id`` and the sessions it was forked from, nearest first (a primary-key
    read per fork). A fork's copied history is theirs, so none of them is another
    session of the scope for it."""
    chain = [stream_id]
    while True:
        found = _prebuilt(conn, "forked_from", lambda: sa.select(sessions.c.forked_from)
                          .where(sessions.c.stream_id == sa.bindparam("stream_id"))
                          ).fetch(conn, {"stream_id": chain[-1]})
        parent = found[0][0] if found else None
        if parent is None or parent in chain:
            return chain
        chain.append(str(parent))

def load_observations(conn: sa.Connection, scope: str, limit: int) -> tuple[Observation, ...]:
    """The scope's ``limit`` most recent observations, oldest first."""
    if limit <= 0:
        return ()
    rows = _prebuilt(conn, "observations", lambda: sa.select(observations).where(
        observations.c.scope == sa.bindparam("scope")).order_by(
        observations.c.position.desc()).limit(sa.bindparam("limit"))
    ).fetch_dicts(conn, {"scope": scope, "limit": limit})
    newest_first = [Observation(kind=r["kind"], content=r["content"], source=r["source"],
                                recorded_at=r["recorded_at"], position=int(r["position"]),
                                stream_id=r["stream_id"]) for r in rows]
    return tuple(reversed(newest_first))


def load_previous_session(conn: sa.Connection, scope: str,
                          stream_id: str) -> PreviousSession | None:
    """The scope's most recently ended session other than ``stream_id`` and the sessions
    it was forked from."""
    lineage = session_lineage(conn, stream_id)

    def build() -> sa.Select[Any]:
        return (sa.select(sessions.c.stream_id, sessions.c.end_summary, sessions.c.ended_at,
                          sessions.c.ended_position)
                .where(sessions.c.scope == sa.bindparam("scope"),
                       sessions.c.ended_position.is_not(None),
                       sessions.c.stream_id.not_in(
                           [sa.bindparam(f"s{i}") for i in range(len(lineage))]))
                .order_by(sessions.c.ended_position.desc()).limit(1))

    found = driver_statement(conn.dialect, ("view", "previous_session", len(lineage)), build
                             ).fetch_dicts(conn, {"scope": scope, **{
                                 f"s{i}": name for i, name in enumerate(lineage)}})
    if not found:
        return None
    row = found[0]
    return PreviousSession(stream_id=row["stream_id"], summary=row["end_summary"],
                           ended_at=row["ended_at"], position=int(row["ended_position"]))


# -- session sections ---------------------------------------------------------------------

def load_items(conn: sa.Connection, stream_id: str,
               after_position: int | None = None) -> tuple[Item, ...]:
    """The session's context items in put order (only those put after ``after_position``)."""
    # Each put is its own event, so positions are unique: a total order.
    query = sa.select(context_items).where(context_items.c.stream_id == stream_id)
    if after_position is not None:
        query = query.where(context_items.c.position > after_position)
    rows = conn.execute(query.order_by(context_items.c.position)).mappings()
    return tuple(Item(item_id=r["item_id"], kind=r["kind"], content=r["content"],
                      chapter=r["chapter"], position=int(r["position"]),
                      **{flag: r[flag] for flag in FLAGS})
                 for r in rows)


def load_item_set(conn: sa.Connection, stream_id: str,
                  probe: ItemsProbe | None = None) -> ItemSet | None:
    """The session's items as of its latest event (None: no events). When the set the
    ``probe`` offers is a prefix of this log's stream, only what changed after it is
    read: the item rows put after it and the stream's ``item.removed`` events after it."""
    found = _prebuilt(conn, "stream_head", lambda: sa.select(
        events.c.position, events.c.stream_version, events.c.hash)
        .where(events.c.stream_id == sa.bindparam("stream_id"))
        .order_by(events.c.stream_version.desc()).limit(1)).fetch(conn, {"stream_id": stream_id})
    if not found:
        return None
    latest = found[0]
    position, version, event_hash = int(latest[0]), int(latest[1]), str(latest[2])
    base = probe(stream_id) if probe is not None else None
    if base is not None and base.stream_id == stream_id and base.stream_version <= version \
            and _event_hash(conn, base.position, stream_id) == base.event_hash:
        if base.stream_version == version:
            return base
        newer = load_items(conn, stream_id, after_position=base.position)
        removed = {json.loads(data)["item_id"] for data in conn.execute(
            sa.select(events.c.data).where(
                events.c.stream_id == stream_id, events.c.stream_version > base.stream_version,
                events.c.type == "item.removed")).scalars()}
        if not newer and not removed:  # e.g. a chapter move: the very same items
            return ItemSet(stream_id, position, version, event_hash, base.items, base.ids)
        newer_ids = {item.item_id for item in newer}
        gone = removed | newer_ids
        # Items put after the base come after all of its items in put order.
        kept = (base.items if gone.isdisjoint(base.ids)
                else tuple(item for item in base.items if item.item_id not in gone))
        return ItemSet(stream_id, position, version, event_hash, kept + newer,
                       (base.ids - removed) | newer_ids)
    items = load_items(conn, stream_id)
    return ItemSet(stream_id, position, version, event_hash, items,
                   frozenset(item.item_id for item in items))


def load_documents(conn: sa.Connection, stream_id: str) -> tuple[Document, ...]:
    """The session's documents by doc_id; content as stored (a string or an object)."""
    rows = _prebuilt(conn, "documents", lambda: sa.select(documents).where(
        documents.c.stream_id == sa.bindparam("stream_id")).order_by(documents.c.doc_id)
    ).fetch_dicts(conn, {"stream_id": stream_id})
    return tuple(sorted((Document(doc_id=r["doc_id"], kind=r["kind"],
                                  content=json.loads(r["content"]),
                                  position=int(r["position"])) for r in rows),
                        key=lambda doc: doc.doc_id))


def load_sources(conn: sa.Connection, scope: str) -> tuple[Source, ...]:
    """The scope's registered sources by (source_id, version)."""
    rows = _prebuilt(conn, "sources", lambda: sa.select(knowledge_sources).where(
        knowledge_sources.c.scope == sa.bindparam("scope")).order_by(
        knowledge_sources.c.source_id, knowledge_sources.c.version)
    ).fetch_dicts(conn, {"scope": scope})
    return tuple(sorted((Source(source_id=r["source_id"], version=r["version"],
                                trust=float(r["trust"]), neutral=r["neutral"],
                                compliance=_json(r["compliance"])) for r in rows),
                        key=lambda source: (source.source_id, source.version)))


def load_snippets(conn: sa.Connection, scope: str,
                  after_position: int | None = None) -> tuple[Snippet, ...]:
    """The scope's snippets by snippet_id (only those put after ``after_position``)."""
    query = sa.select(knowledge_snippets).where(knowledge_snippets.c.scope == scope)
    if after_position is not None:
        query = query.where(knowledge_snippets.c.position > after_position)
    rows = conn.execute(query.order_by(knowledge_snippets.c.snippet_id)).mappings()
    return tuple(sorted((Snippet(snippet_id=r["snippet_id"], source_id=r["source_id"],
                                 source_version=r["source_version"], text=r["text"],
                                 entities=tuple(json.loads(r["entities"])),
                                 position=int(r["position"])) for r in rows),
                        key=lambda snippet: snippet.snippet_id))


def _event_hash(conn: sa.Connection, position: int, stream_id: str) -> str | None:
    found = _prebuilt(conn, "event_hash", lambda: sa.select(events.c.hash).where(
        events.c.position == sa.bindparam("position"),
        events.c.stream_id == sa.bindparam("stream_id"))).fetch(
        conn, {"position": position, "stream_id": stream_id})
    return str(found[0][0]) if found else None


def load_snippet_set(conn: sa.Connection, scope: str, probe: SnippetProbe | None
                     ) -> tuple[SnippetBase | None, SnippetBase | None, tuple[Snippet, ...]]:
    """The scope's snippet head, and its snippets: all of them, or when a base the
    ``probe`` offers is a prefix of this log's scope stream, only those put after it
    (index seeks plus the rows that changed)."""
    position = conn.execute(
        sa.select(knowledge_snippets.c.position).where(knowledge_snippets.c.scope == scope)
        .order_by(knowledge_snippets.c.position.desc()).limit(1)).scalar_one_or_none()
    stream = f"{SCOPE_PREFIX}{scope}"
    head = None
    if position is not None:
        found = _event_hash(conn, int(position), stream)
        head = None if found is None else SnippetBase(int(position), found)
    if head is not None and probe is not None:
        for base in probe(scope):
            if base.position <= head.position \
                    and _event_hash(conn, base.position, stream) == base.event_hash:
                return head, base, load_snippets(conn, scope, after_position=base.position)
    return head, None, load_snippets(conn, scope)


def load_ended_sessions(conn: sa.Connection, scope: str, stream_id: str,
                        limit: int) -> tuple[PreviousSession, ...]:
    """The scope's ``limit`` latest ended sessions (not ``stream_id`` nor the sessions it
    was forked from) with a summary, newest first: a seek on (scope, ended_position)."""
    if limit <= 0:
        return ()
    rows = conn.execute(
        sa.select(sessions.c.stream_id, sessions.c.end_summary, sessions.c.ended_at,
                  sessions.c.ended_position)
        .where(sessions.c.scope == scope, sessions.c.ended_position.is_not(None),
               sessions.c.stream_id.not_in(session_lineage(conn, stream_id)),
               sessions.c.end_summary.is_not(None))
        .order_by(sessions.c.ended_position.desc()).limit(limit)).mappings()
    return tuple(PreviousSession(stream_id=r["stream_id"], summary=r["end_summary"],
                                 ended_at=r["ended_at"], position=int(r["ended_position"]))
                 for r in rows)


def load_entities(conn: sa.Connection, scope: str) -> tuple[Entity, ...]:
    """The scope's entities by entity_id."""
    rows = _prebuilt(conn, "entities", lambda: sa.select(knowledge_entities).where(
        knowledge_entities.c.scope == sa.bindparam("scope")).order_by(
        knowledge_entities.c.entity_id)).fetch_dicts(conn, {"scope": scope})
    return tuple(sorted((Entity(entity_id=r["entity_id"], name=r["name"],
                                facts=tuple(EntityFact(text=f["text"],
                                                       critical=bool(f["critical"]))
                                            for f in json.loads(r["facts"])),
                                tags=tuple(json.loads(r["tags"]))) for r in rows),
                        key=lambda entity: entity.entity_id))


def load_persona(conn: sa.Connection, stream_id: str) -> Persona | None:
    """The session's persona, if one was set."""
    found = _prebuilt(conn, "persona", lambda: sa.select(personas).where(
        personas.c.stream_id == sa.bindparam("stream_id"))).fetch_dicts(
        conn, {"stream_id": stream_id})
    if not found:
        return None
    row = found[0]
    return Persona(agent_id=row["agent_id"],
                   knowledge_scope=tuple(json.loads(row["knowledge_scope"])),
                   beliefs=_json(row["beliefs"]))


def _json(text: str | None) -> Any:
    return None if text is None else json.loads(text)

