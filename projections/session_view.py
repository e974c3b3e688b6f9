"""The read view: a plain-data snapshot of one session's projections at a position.

This is the only thing the assembler sees. It holds no connection and issues no SQL,
so assembler policies are pure functions of (view, now, policy). Collections are tuples
in a documented order; mappings are built in sorted key order.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal, Protocol

HistoryMode = Literal["none", "tail", "full"]

HistoryMeasure = Callable[[Sequence["Message"]], Sequence[int]]
"""The cost (in the budget's unit) of each of a page of messages, as the profile will
count them. The read view calls it to know when the history window is full."""

ItemsProbe = Callable[[str], "ItemSet | None"]
"""Given a session, the item set the caller already holds for it (None: none)."""

class MessagePool(Protocol):
    """Messages read before, by (log position, chained hash): a message at a position
    with that hash is always the same, in any database, so a read view hands back the
    object read before (``assembler.memo.CanonicalMemo`` is one)."""

    def lookup(self, key: Hashable) -> object | None:
        """The message kept under ``key``, or None."""

    def remember(self, key: Hashable, value: object) -> None:
        """Keep ``value`` under ``key``."""


HistoryProbe = Callable[[str], "MessageSet | None"]
"""Given a session, the whole history the caller already holds for it (None: none)."""

SnippetProbe = Callable[[str], Sequence["SnippetBase"]]
"""Given a scope, the snippet sets the caller already holds for it, best first (several
databases may share a scope name)."""


@dataclass(frozen=True, slots=True)
class ViewRequest:
    """What a profile needs loaded; everything else stays empty (and costs nothing)."""

    history: HistoryMode = "none"
    """``tail``: the latest summary and the messages after it (all if none); ``full``: all."""
    now: datetime | None = None
    usage_window: timedelta | None = None
    """Tool usage counted over ``[now - usage_window, now]``; requires ``now``."""
    token_encoding: str | None = None
    """With ``history="tail"``: the encoding whose memoized prefix total to load."""
    history_budget: int | None = None
    """Load the history newest first and stop once ``history_measure`` of the loaded
    messages is over this budget (the message that crosses it is loaded too, so the
    profile sees the first one that does not fit). None loads every message."""
    history_measure: HistoryMeasure | None = None
    history_whole_units: bool = False
    """With a ``history_budget``: never stop loading at a tool result, so a window's
    oldest loaded message is not a result whose call was left unread."""
    observations: int = 0
    """How many of the scope's most recent observations to load."""
    previous_session: bool = False
    tools: bool = False
    items: bool = False
    documents: bool = False
    lorebooks: bool = False
    """The scope's lorebooks (``SessionView.lorebooks``)."""
    card: bool = True
    """The card (``SessionView.card``); a caller that reads only the settings skips it."""
    items_probe: ItemsProbe | None = None
    """With ``items``: when the probe's set is a prefix of this log's session stream
    (the same chained hash at its position), only the items put or removed after it are
    read (a seek on the item rows, a range of the stream's events); ``SessionView.items``
    is the whole set either way."""
    history_probe: HistoryProbe | None = None
    """With a whole history to load (no ``history_budget``, no summary to start after):
    when the probe's set is a prefix of this log's session (the same chained hash at its
    newest message, and no message retracted or replaced since), only the messages after
    it are read; ``History.messages`` is the whole history either way."""
    message_pool: Callable[[str], MessagePool] | None = None
    """Given a session, where the messages it read before are kept: a message read again
    (the same position and chained hash) is that object, not a new one."""
    knowledge: bool = False
    snippet_probe: SnippetProbe | None = None
    """With ``knowledge``: when one of the probe's bases is a prefix of this log's scope
    stream, only the snippets put after it are loaded (``SessionView.snippets_since``)."""
    ended_sessions: int = 0
    """How many of the scope's earlier ended sessions with a summary to load."""

    def reads_other_sessions(self) -> bool:
        """True when a section this request loads is written by the scope's *other*
        sessions too (observations, tool usage, the previous or earlier ended sessions),
        so a replay must read their streams as well. A new section that reads such state
        says so here, next to its field."""
        return bool(self.observations > 0 or self.previous_session or self.tools
                    or self.usage_window is not None or self.ended_sessions > 0)


@dataclass(frozen=True, slots=True)
class MessageCounts:
    """Non-retracted messages by role; ``retracted`` counts withdrawn ones."""

    system: int = 0
    developer: int = 0
    user: int = 0
    assistant: int = 0
    tool: int = 0
    total: int = 0
    retracted: int = 0


@dataclass(frozen=True, slots=True)
class Message:
    """One non-retracted message; ``seq`` is its stream version (orders a session)."""

    seq: int
    message_id: str
    role: str
    name: str | None
    content: str
    """The text of the content (``store.chat.content_text``): the string, or the text
    parts joined by line breaks; "" when there is none."""
    position: int
    recorded_at: datetime
    parts: tuple[Mapping[str, Any], ...] | None = None
    """The content as stored when it is a list of parts (``store.chat``), else None."""
    tool_calls: tuple[Mapping[str, Any], ...] = ()
    """An assistant message's tool calls, as stored (``{id, type, function}``)."""
    tool_call_id: str | None = None
    """The call a tool message answers."""
    is_error: bool | None = None
    """A tool message reports a failed call."""

    @property
    def call_ids(self) -> tuple[str, ...]:
        """The ids of this message's tool calls, in order."""
        return tuple(str(call["id"]) for call in self.tool_calls)


@dataclass(frozen=True, slots=True)
class HistorySummary:
    """The latest ``history.summarized``; ``through_seq`` is None if its message is unknown."""

    summary: str
    through_message_id: str
    through_seq: int | None
    position: int


@dataclass(frozen=True, slots=True)
class MessageSet:
    """Every non-retracted message of a session, as of its newest one (whose chained hash
    ``event_hash`` commits to the stream up to it, so it names the set in any database),
    with the session's count of retracted (or replaced) messages then."""

    stream_id: str
    messages: tuple[Message, ...]
    """In seq order; never empty."""
    event_hash: str
    retracted: int


@dataclass(frozen=True, slots=True)
class History:
    """Chat history as loaded for the request, messages in ``seq`` order."""

    summary: HistorySummary | None
    messages: tuple[Message, ...]
    complete: bool
    """True when ``messages`` holds every non-retracted message of the session."""
    summarized_count: int
    """Non-retracted messages with ``seq <= summary.through_seq`` (0 without a summary)."""
    prefix_tokens: int | None = None
    """Memoized token total (``ViewRequest.token_encoding``) of the non-retracted messages
    with ``seq <= prefix_through_seq``; None when no memo applies."""
    prefix_through_seq: int = 0
    summarized_retracted: int = 0
    """Retracted messages with ``seq <= summary.through_seq``: the version of a memo
    stored for this summary (later retractions, in the tail, do not change it)."""
    summarized_messages: tuple[Message, ...] = ()
    """With ``tail``: the summarized messages NOT covered by the memo
    (``prefix_through_seq < seq <= summary.through_seq``), so the tokens of everything the
    summary replaced = ``prefix_tokens + count(summarized_messages)`` at O(what changed)."""
    unloaded: int = 0
    """With a ``history_budget``: non-retracted messages of the requested range (after the
    summary for ``tail``, all for ``full``) older than ``messages``, left unread."""
    oldest_unloaded: Message | None = None
    """The oldest of those (None when ``unloaded`` is 0), to name the range they form."""
    message_set: MessageSet | None = None
    """When every message was loaded (no budget, no summary to start after) and there is
    one: the set, for a memo to offer next time (``ViewRequest.history_probe``)."""


@dataclass(frozen=True, slots=True)
class Tool:
    """A tool registered in the scope."""

    name: str
    tool_type: str
    server_name: str | None
    description: str | None
    position: int


@dataclass(frozen=True, slots=True)
class ToolUsage:
    """Usage of one tool in the scope: in the window and over its lifetime. A tool is its
    name and the MCP server its uses named (None when they named none)."""

    tool_name: str
    server_name: str | None
    window_count: int
    window_last_used: datetime | None
    lifetime_count: int
    lifetime_last_used: datetime | None


@dataclass(frozen=True, slots=True)
class Observation:
    """An observation recorded in any session of the scope."""

    kind: str
    content: str
    source: str | None
    recorded_at: datetime
    position: int
    stream_id: str


@dataclass(frozen=True, slots=True)
class PreviousSession:
    """The scope's most recently ended session other than this one."""

    stream_id: str
    summary: str | None
    ended_at: datetime | None
    position: int


@dataclass(frozen=True, slots=True)
class Item:
    """A ``novel`` context item; ``position`` is where it was last put (put order)."""

    item_id: str
    kind: str
    content: str
    chapter: int | None
    active: bool | None
    in_scene: bool | None
    pov: bool | None
    evolving: bool | None
    critical: bool | None
    position: int


@dataclass(frozen=True, slots=True)
class ItemSet:
    """A session's context items as of its event at ``position`` (stream version
    ``stream_version``), whose chained hash ``event_hash`` commits to the whole stream up
    to it, so it names the item set in any database."""

    stream_id: str
    position: int
    stream_version: int
    event_hash: str
    items: tuple[Item, ...]
    """By put order."""
    ids: frozenset[str]


@dataclass(frozen=True, slots=True)
class Document:
    """A document put in the session (plan state, dependency graph or text)."""

    doc_id: str
    kind: str
    content: Any
    position: int


@dataclass(frozen=True, slots=True)
class Source:
    """A registered knowledge source."""

    source_id: str
    version: str
    trust: float
    neutral: bool | None
    compliance: Mapping[str, Any] | None


@dataclass(frozen=True, slots=True)
class Snippet:
    """A retrievable snippet with its provenance."""

    snippet_id: str
    source_id: str
    source_version: str
    text: str
    entities: tuple[str, ...]
    position: int


@dataclass(frozen=True, slots=True)
class SnippetBase:
    """A scope's snippets as of the snippet event at ``position``, whose chained hash is
    ``event_hash``: the hash commits to the whole scope stream up to it, so it names the
    snippet set in any database. A caller's memo of that set may subclass it."""

    position: int
    event_hash: str


@dataclass(frozen=True, slots=True)
class EntityFact:
    """One fact about an entity."""

    text: str
    critical: bool


@dataclass(frozen=True, slots=True)
class Entity:
    """A world entity."""

    entity_id: str
    name: str
    facts: tuple[EntityFact, ...]
    tags: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Persona:
    """The session's persona agent and what it may know."""

    agent_id: str
    knowledge_scope: tuple[str, ...]
    beliefs: Any


@dataclass(frozen=True, slots=True)
class ScopeLorebook:
    """A scope's lorebook: the book as written (a ``lorebook_v3`` file's ``data``)."""

    book_id: str
    book: Mapping[str, Any]
    position: int


@dataclass(frozen=True, slots=True)
class SessionView:
    """Everything the assembler may know about one session at ``position``."""

    stream_id: str
    scope: str
    position: int
    exists: bool
    title: str | None = None
    agent: str | None = None
    started_at: datetime | None = None
    ended_at: datetime | None = None
    last_activity: datetime | None = None
    counts: MessageCounts = field(default_factory=MessageCounts)
    chapter: int | None = None
    scene: str | None = None
    settings: Mapping[str, Any] = field(default_factory=dict)
    """Scope defaults overlaid by session overrides, in sorted key order."""
    setting_sources: Mapping[str, str] = field(default_factory=dict)
    """For each setting: ``session`` or ``scope``."""
    card: Mapping[str, Any] = field(default_factory=dict)
    """The current character card's fields, in field-name order: the scope's card with
    the session's own fields laid over it (``view_loader.load_card``)."""
    lorebooks: tuple[ScopeLorebook, ...] = ()
    """With ``ViewRequest.lorebooks``: the scope's lorebooks, by book id."""
    history: History | None = None
    tools: tuple[Tool, ...] = ()
    """Registered tools in the scope, by name (``ViewRequest.tools`` also loads lifetime
    usage into ``tool_usage``)."""
    tool_usage: tuple[ToolUsage, ...] = ()
    """Usage per tool name in the scope, by name (only tools used at least once)."""
    usage_window: tuple[datetime, datetime] | None = None
    observations: tuple[Observation, ...] = ()
    """The scope's most recent observations, oldest first."""
    previous_session: PreviousSession | None = None
    items: tuple[Item, ...] = ()
    """Context items by put order."""
    item_set: ItemSet | None = None
    """With ``items``: the set ``items`` came from, for a memo to offer next time (None
    when the session has no events)."""
    documents: tuple[Document, ...] = ()
    """Documents by doc_id."""
    sources: tuple[Source, ...] = ()
    """Registered sources, by (source_id, version)."""
    snippets: tuple[Snippet, ...] = ()
    """The scope's snippets, by snippet_id."""
    entities: tuple[Entity, ...] = ()
    """The scope's entities, by entity_id."""
    persona: Persona | None = None
    snippet_head: SnippetBase | None = None
    """With ``knowledge``: the scope's latest snippet event (None without snippets)."""
    snippets_since: SnippetBase | None = None
    """None: ``snippets`` is the scope's whole set. Else the probe's base (the very object
    it returned), and ``snippets`` holds only those put after it."""
    ended_sessions: tuple[PreviousSession, ...] = ()
    """The scope's earlier ended sessions with a summary, newest first."""
