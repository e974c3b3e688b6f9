"""Realistic histories for the assembly legs: a card chat and a project scope of N events.

Both are seeded, so every run and every size has the same shape, and both mix about
half messages, a quarter tool uses and a quarter setting changes and other events:

- ``card_chat``: one CardShark-style chat (scope ``cards``). A ``card.set`` and
  ``compression_level: chat_only`` open it, as a summarizing app sets it up; every ~100
  messages the app's LLM summarizes all but the last 20 (``history.summarized``), so
  the tail stays bounded; the user regenerates a reply now and then (a
  ``message.retracted`` of the newest message), edits the card rarely and changes app
  settings.
- ``project_scope``: one Laminark-style project (scope ``webapp``): ~30 registered tools
  (builtins, MCP servers and tools, slash commands, skills, a plugin), then one coding
  session after another, each ended with a summary except the last (the session being
  assembled), with tool uses whose mix drifts over time, observations and settings.

Events are grouped into append batches (consecutive events of one stream, at most
``batch_size`` each); the writer gives each batch its own time, so the history spans
the given number of days.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

CARD_SCOPE = "cards"
CARD_SESSION = "chat-mira"
PROJECT_SCOPE = "webapp"
SUMMARY_EVERY = 100
"""Messages between two ``history.summarized`` events."""
TAIL_KEPT = 20
"""Messages a summary leaves out (they stay the verbatim tail)."""
RECENT_CARD_EVENTS = 150
"""The card chat's last events, identical at every size (see ``card_chat``)."""
PREVIOUS_SESSION_EVENTS = 200
CURRENT_SESSION_EVENTS = 40
"""The project's last ended session and the open one, identical at every size."""

Event = dict[str, Any]

# A fixed vocabulary gives messages a realistic length and token count without a corpus.
_WORDS = (
    "the", "a", "and", "to", "of", "in", "it", "is", "that", "you", "was", "for", "on",
    "are", "with", "as", "his", "her", "they", "be", "at", "one", "have", "this", "from",
    "by", "not", "but", "what", "all", "were", "when", "we", "there", "can", "an", "your",
    "which", "their", "said", "if", "do", "will", "each", "about", "how", "up", "out",
    "them", "then", "she", "many", "some", "so", "these", "would", "other", "into", "has",
    "more", "time", "look", "two", "write", "go", "see", "number", "way", "could", "people",
    "than", "first", "water", "been", "call", "who", "now", "find", "long", "down", "day",
    "did", "get", "come", "made", "may", "part", "window", "garden", "lantern", "river",
    "station", "letter", "storm", "quiet", "bright", "remember", "promise", "journey",
    "function", "module", "request", "database", "migration", "endpoint", "cache", "test",
    "deploy", "schema", "query", "timeout", "refactor", "component", "render", "token",
)


def _text(rng: random.Random, low: int, high: int) -> str:
    words = [rng.choice(_WORDS) for _ in range(rng.randint(low, high))]
    return (" ".join(words).capitalize() + ".")


def _setting(key: str, value: Any) -> Event:
    return {"type": "setting.changed", "data": {"key": key, "value": value}}


@dataclass(frozen=True, slots=True)
class Batch:
    """One append: consecutive events of one stream."""

    stream_id: str
    events: list[Event]


@dataclass(frozen=True)
class ScopeHistory:
    """A generated history: the session to assemble, its scope and the append batches."""

    profile: str
    session: str
    scope: str
    batches: list[Batch]

    @property
    def events(self) -> int:
        """How many events the history holds."""
        return sum(len(batch.events) for batch in self.batches)

    def counts(self) -> dict[str, int]:
        """Events by type, in type order (for the report)."""
        counts: dict[str, int] = {}
        for batch in self.batches:
            for event in batch.events:
                counts[event["type"]] = counts.get(event["type"], 0) + 1
        return dict(sorted(counts.items()))


def batches_of(stream_events: Sequence[tuple[str, Event]], batch_size: int) -> list[Batch]:
    """Runs of consecutive events of one stream, cut at ``batch_size``, in order."""
    out: list[Batch] = []
    for stream_id, event in stream_events:
        if out and out[-1].stream_id == stream_id and len(out[-1].events) < batch_size:
            out[-1].events.append(event)
        else:
            out.append(Batch(stream_id, [event]))
    return out


# -- the card chat -----------------------------------------------------------------------

_CHAT_TOOLS = ("web_search", "image_generation", "lorebook_lookup", "dice_roll",
               "text_to_speech", "mcp__memory__recall", "mcp__memory__store")
_APP_SETTINGS: dict[str, tuple[Any, ...]] = {
    "temperature": (0.6, 0.7, 0.8, 0.9, 1.0, 1.1),
    "top_p": (0.85, 0.9, 0.95, 1.0),
    "max_response_tokens": (256, 400, 512, 800, 1024),
    "context_limit": (16_384, 24_576, 32_768, 65_536),
    "streaming": (True, False),
    "theme": ("dark", "light", "sepia"),
    "tts_voice": ("alloy", "nova", "shimmer", None),
    "lorebook_depth": (2, 4, 6, 8),
}


class _Chat:
    """The card chat's messages: ids, the unsummarized tail and the summary cadence."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.made = 0
        self.turn = 0
        """User and assistant take turns; the recent segment starts with the user."""
        self.tail: list[str] = []
        """Live message ids after the latest summary's ``through_message_id``."""
        self.since_summary = 0
        self.forced_at: int | None = None
        self.forced_done = False

    def start_recent(self, rng: random.Random, summarize_after: int) -> None:
        """Switch to the recent segment: its own generator, one summary after
        ``summarize_after`` of its messages and none after that."""
        self.rng = rng
        self.turn = 0
        self.forced_at = self.made + summarize_after

    def message(self) -> Event:
        """The next chat message (user and assistant take turns)."""
        user = self.turn % 2 == 0
        message_id = f"m{self.made:06d}"
        self.made += 1
        self.turn += 1
        self.tail.append(message_id)
        self.since_summary += 1
        content = _text(self.rng, 8, 60) if user else _text(self.rng, 30, 150)
        return {"type": "message.appended", "data": {
            "message_id": message_id, "role": "user" if user else "assistant",
            "name": "Alex" if user else "Mira", "content": content}}

    def summary_due(self) -> bool:
        """True when the app would summarize now."""
        if len(self.tail) <= TAIL_KEPT:
            return False
        if self.forced_at is None:
            return self.since_summary >= SUMMARY_EVERY
        return self.made >= self.forced_at and not self.forced_done

    def summarize(self) -> Event:
        """Summarize everything but the last ``TAIL_KEPT`` messages."""
        through = self.tail[-TAIL_KEPT - 1]
        self.tail = self.tail[-TAIL_KEPT:]
        self.since_summary = 0
        self.forced_done = self.forced_at is not None
        return {"type": "history.summarized", "data": {
            "through_message_id": through, "summary": _text(self.rng, 150, 260)}}

    def retract_newest(self) -> Event | None:
        """Withdraw the newest message (a regenerated reply), if the tail has one."""
        if not self.tail:
            return None
        return {"type": "message.retracted", "data": {"message_id": self.tail.pop()}}

    def step(self) -> Event | None:
        """The chat's next event: a summary when due, else one drawn from the mix."""
        rng = self.rng
        if self.summary_due():
            return self.summarize()
        roll = rng.random()
        if roll < 0.50:
            return self.message()
        if roll < 0.75:
            name = rng.choice(_CHAT_TOOLS)
            return {"type": "tool.used", "data": {"tool_name": name, "ok": rng.random() < 0.95}}
        if roll < 0.76:
            return self.retract_newest()
        if roll < 0.7605:
            return {"type": "card.set", "data": {"personality": _text(rng, 30, 45)}}
        key = rng.choice(sorted(_APP_SETTINGS))
        return _setting(key, rng.choice(_APP_SETTINGS[key]))


def _card(rng: random.Random) -> Event:
    return {"type": "card.set", "data": {
        "name": "Mira",
        "system_prompt": "You are {{char}}, talking with {{user}}. " + _text(rng, 40, 60),
        "description": _text(rng, 110, 140),
        "personality": _text(rng, 30, 45),
        "scenario": _text(rng, 50, 70),
        "first_mes": "*{{char}} looks up.* " + _text(rng, 60, 90),
        "mes_example": "<START>\n{{user}}: " + _text(rng, 10, 20) + "\n{{char}}: "
                       + _text(rng, 40, 80),
        "tags": ["fantasy", "slice of life"], "creator": "benchmark"}}


def card_chat(events: int, *, seed: int, batch_size: int) -> ScopeHistory:
    """A card chat of exactly ``events`` events (its scope's defaults included).

    The last ``RECENT_CARD_EVENTS`` come from a generator seeded alike for every size, with
    the last summary at the same place in them, so the assembled context (card, summary,
    tail) is the same at every size: only the length of the history differs.
    """
    rng = random.Random(seed * 1_000_003 + events)
    scope_stream = f"scope:{CARD_SCOPE}"
    out: list[tuple[str, Event]] = [
        (scope_stream, _setting("user_name", "Alex")),
        (scope_stream, _setting("context_limit", 32_768)),
        (CARD_SESSION, {"type": "session.started",
                        "data": {"scope": CARD_SCOPE, "title": "Evening chat with Mira"}}),
        (CARD_SESSION, _card(random.Random(seed))),
        (CARD_SESSION, _setting("compression_level", "chat_only")),
    ]
    if events < len(out) + RECENT_CARD_EVENTS:
        raise ValueError(f"a card chat needs at least {len(out) + RECENT_CARD_EVENTS} events")
    chat = _Chat(rng)
    while len(out) < events:
        if chat.forced_at is None and len(out) == events - RECENT_CARD_EVENTS:
            # The user reworks the card; then the chat goes on as in every other size.
            recent = random.Random(seed)
            chat.start_recent(recent, summarize_after=2 * TAIL_KEPT)
            event: Event | None = {"type": "card.set",
                                   "data": {"personality": _text(recent, 30, 45)}}
        else:
            event = chat.step()
        if event is not None:
            out.append((CARD_SESSION, event))
    return ScopeHistory("card", CARD_SESSION, CARD_SCOPE, batches_of(out, batch_size))


# -- the project scope -------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class _ProjectTool:
    """A registered tool and how it is used: weight, and the part of the timeline it is
    used in (fractions of the history), so usage drifts as a real project's does."""

    name: str
    tool_type: str
    weight: float
    server: str | None = None
    description: str | None = None
    used_from: float = 0.0
    used_until: float = 1.0


_PROJECT_TOOLS: tuple[_ProjectTool, ...] = (
    *(_ProjectTool(name, "builtin", weight) for name, weight in (
        ("Read", 30), ("Edit", 20), ("Bash", 18), ("Grep", 10), ("Glob", 6), ("Write", 5),
        ("WebFetch", 2), ("TodoWrite", 3))),
    _ProjectTool("github", "mcp_server", 0, "github", "GitHub issues and pull requests"),
    _ProjectTool("postgres", "mcp_server", 0, "postgres", "Read-only SQL on the dev DB"),
    _ProjectTool("jira", "mcp_server", 0, "jira", "Ticket tracker"),
    _ProjectTool("mcp__github__get_issue", "mcp_tool", 4, "github"),
    _ProjectTool("mcp__github__create_pull_request", "mcp_tool", 1.5, "github"),
    _ProjectTool("mcp__github__list_commits", "mcp_tool", 1, "github"),
    _ProjectTool("mcp__postgres__query", "mcp_tool", 3, "postgres", used_from=0.4),
    _ProjectTool("mcp__postgres__describe_table", "mcp_tool", 1, "postgres", used_from=0.4),
    _ProjectTool("mcp__jira__search_issues", "mcp_tool", 2, "jira", used_until=0.6),
    _ProjectTool("mcp__jira__get_ticket", "mcp_tool", 1.5, "jira", used_until=0.6),
    _ProjectTool("mcp__playwright__navigate", "mcp_tool", 1, "playwright", used_from=0.7),
    _ProjectTool("mcp__playwright__screenshot", "mcp_tool", 0.7, "playwright",
                 used_from=0.7),
    *(_ProjectTool(name, "slash_command", weight, used_from=start) for name, weight, start in (
        ("/commit", 2.5, 0.0), ("/review-pr", 1.2, 0.0), ("/test", 2.0, 0.0),
        ("/deploy", 0.5, 0.3), ("/lint", 0.8, 0.0), ("/changelog", 0.3, 0.8))),
    _ProjectTool("frontend-design", "skill", 0.8, description="Design system conventions"),
    _ProjectTool("db-migration", "skill", 0.6, description="Writing safe schema migrations",
                 used_from=0.4),
    _ProjectTool("prettier-hooks", "plugin", 0.4),
)
_OBSERVATION_KINDS = ("change", "change", "change", "decision", "finding", "finding",
                      "reference")
_SESSION_SETTINGS: dict[str, tuple[Any, ...]] = {
    "model": ("sonnet", "opus", "haiku"),
    "effort": ("low", "medium", "high"),
    "auto_accept_edits": (True, False),
    "output_style": ("concise", "explanatory"),
    "permission_mode": ("default", "plan", "accept_edits"),
}
def _register(tool: _ProjectTool) -> Event:
    data: dict[str, Any] = {"name": tool.name, "tool_type": tool.tool_type}
    if tool.server is not None:
        data["server_name"] = tool.server
    if tool.description is not None:
        data["description"] = tool.description
    return {"type": "tool.registered", "data": data}


class _Project:
    """Sessions of the project scope, one after another."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.used = [tool for tool in _PROJECT_TOOLS if tool.weight > 0]

    def tool_use(self, progress: float) -> Event:
        """A tool use at ``progress`` (0..1) through the history."""
        active = [t for t in self.used if t.used_from <= progress <= t.used_until]
        tool = self.rng.choices(active, weights=[t.weight for t in active])[0]
        data: dict[str, Any] = {"tool_name": tool.name, "ok": self.rng.random() < 0.93}
        if tool.server is not None:
            data["server_name"] = tool.server
        return {"type": "tool.used", "data": data}

    def body(self, session: str, index: int, progress: float, live: list[str]) -> Event:
        """One event inside a session."""
        rng = self.rng
        roll = rng.random()
        if roll < 0.50:
            message_id = f"{session}-m{index}"
            live.append(message_id)
            user = len(live) % 2 == 1
            return {"type": "message.appended", "data": {
                "message_id": message_id, "role": "user" if user else "assistant",
                "content": _text(rng, 6, 40) if user else _text(rng, 20, 120)}}
        if roll < 0.75:
            return self.tool_use(progress)
        if roll < 0.86:
            key = rng.choice(sorted(_SESSION_SETTINGS))
            return _setting(key, rng.choice(_SESSION_SETTINGS[key]))
        if roll < 0.985 or not live:
            return {"type": "observation.recorded", "data": {
                "kind": rng.choice(_OBSERVATION_KINDS), "content": _text(rng, 8, 40),
                "source": rng.choice(("Edit", "Bash", "mcp__github__get_issue", "Read"))}}
        return {"type": "message.retracted", "data": {"message_id": live.pop()}}


def _project_session(project: _Project, out: list[tuple[str, Event]], number: int,
                     size: int, *, total: int, ended: bool) -> str:
    """Append one session of ``size`` events to ``out``; returns its stream id."""
    rng = project.rng
    session = f"{PROJECT_SCOPE}-session-{number:05d}"
    out.append((session, {"type": "session.started", "data": {
        "scope": PROJECT_SCOPE, "title": f"task {number}: " + _text(rng, 3, 8),
        "agent": "claude-code"}}))
    live: list[str] = []
    for index in range(size - 2 if ended else size - 1):
        out.append((session, project.body(session, index, len(out) / total, live)))
    if ended:
        out.append((session, {"type": "session.ended",
                              "data": {"summary": _text(rng, 60, 120)}}))
    return session


def project_scope(events: int, *, seed: int, batch_size: int) -> ScopeHistory:
    """A project scope of exactly ``events`` events; its last session stays open.

    The last ended session and the open one come from a generator seeded alike for every
    size, so the context (previous summary, recent observations) is the same at every
    size; tool usage, counted over the last 7 days, grows with the history.
    """
    scope_stream = f"scope:{PROJECT_SCOPE}"
    out: list[tuple[str, Event]] = [(scope_stream, _register(t)) for t in _PROJECT_TOOLS]
    out += [(scope_stream, _setting("language", "en")),
            (scope_stream, _setting("auto_accept_edits", False))]
    recent = PREVIOUS_SESSION_EVENTS + CURRENT_SESSION_EVENTS
    if events < len(out) + recent:
        raise ValueError(f"a project scope needs at least {len(out) + recent} events")
    project = _Project(random.Random(seed * 1_000_003 + events))
    number = 0
    while len(out) < events - recent:
        left = events - recent - len(out)
        size = project.rng.randint(120, 280)
        if left - size < 2:  # the remainder could not be a session of its own
            size = left
        _project_session(project, out, number, size, total=events, ended=size >= 2)
        number += 1
    project.rng = random.Random(seed)
    _project_session(project, out, number, PREVIOUS_SESSION_EVENTS, total=events, ended=True)
    session = _project_session(project, out, number + 1, CURRENT_SESSION_EVENTS,
                               total=events, ended=False)
    return ScopeHistory("session", session, PROJECT_SCOPE, batches_of(out, batch_size))


# -- the novel draft ---------------------------------------------------------------------

NOVEL_SCOPE = "book-saltmarsh"
NOVEL_SESSION = "draft-saltmarsh"
NOVEL_CHAPTER = 12
"""The chapter the draft is at when it is assembled."""
_NOVEL_ITEMS: tuple[tuple[str, str, dict[str, Any]], ...] = (
    *((f"sum-ch{n:02d}", "summary", {"chapter": n}) for n in range(1, NOVEL_CHAPTER)),
    ("act-1", "act_summary", {}), ("act-2", "act_summary", {}),
    ("world-island", "world", {}), ("world-abbey", "world", {}),
    ("plot-spine", "plot", {}), ("style-voice", "style", {}),
    ("char-ines", "character", {"in_scene": True, "pov": True}),
    ("char-tomas", "character", {"in_scene": True}),
    ("char-abbess", "character", {"in_scene": False}),
    ("rel-ines-tomas", "relationship_state", {"in_scene": True, "evolving": True,
                                              "chapter": NOVEL_CHAPTER}),
    ("rel-ines-abbess", "relationship_state", {}),
    ("fs-bell", "foreshadowing", {"active": True}),
    ("fs-ledger", "foreshadowing", {"active": False}),
    ("scene-plan", "scene_plan", {"evolving": True}),
    ("ex-1", "exemplar", {}), ("ex-2", "exemplar", {}), ("anti-1", "anti_exemplar", {}),
    ("ed-scene", "emotional_directive", {}),
)
"""The draft's items: revised again and again (same ids), so the current set is fixed."""


def _item(rng: random.Random, item_id: str, kind: str, flags: dict[str, Any]) -> Event:
    low, high = (150, 400) if kind in ("character", "world") else (30, 120)
    return {"type": "item.put", "data": {"item_id": item_id, "kind": kind,
                                         "content": _text(rng, low, high), **flags}}


def novel_draft(events: int, *, seed: int, batch_size: int) -> ScopeHistory:
    """A novel-writing session of exactly ``events`` events, assembled at chapter 12.

    The bulk is drafting: chat turns with the writing model, chapter moves, and revisions
    of the draft's ~30 items (an ``item.put`` of an existing id replaces it). The recent
    part, seeded alike for every size, moves to chapter 12 and puts every item's final
    version, so the context is the same at every size while the history grows.
    """
    scope_stream = f"scope:{NOVEL_SCOPE}"
    out: list[tuple[str, Event]] = [
        (scope_stream, _setting("warm_window", 5)),
        (NOVEL_SESSION, {"type": "session.started", "data": {
            "scope": NOVEL_SCOPE, "title": "Saltmarsh: the draft", "agent": "writer"}})]
    recent = 1 + len(_NOVEL_ITEMS)
    if events < len(out) + recent:
        raise ValueError(f"a novel draft needs at least {len(out) + recent} events")
    rng = random.Random(seed * 1_000_003 + events)
    turn = 0
    while len(out) < events - recent:
        roll = rng.random()
        if roll < 0.6:
            user = turn % 2 == 0
            turn += 1
            event: Event = {"type": "message.appended", "data": {
                "role": "user" if user else "assistant",
                "content": _text(rng, 8, 60) if user else _text(rng, 60, 200)}}
        elif roll < 0.95:
            event = _item(rng, *rng.choice(_NOVEL_ITEMS))
        else:
            event = {"type": "chapter.moved", "data": {"chapter": rng.randint(1, NOVEL_CHAPTER)}}
        out.append((NOVEL_SESSION, event))
    final = random.Random(seed)
    out.append((NOVEL_SESSION, {"type": "chapter.moved", "data": {
        "chapter": NOVEL_CHAPTER, "scene": "12.2 The bell at low water"}}))
    out += [(NOVEL_SESSION, _item(final, *spec)) for spec in _NOVEL_ITEMS]
    return ScopeHistory("novel", NOVEL_SESSION, NOVEL_SCOPE, batches_of(out, batch_size))


# -- the book (the incremental novel leg) ------------------------------------------------------

BOOK_SCOPE = "book-longtide"
BOOK_SESSION = "draft-longtide"
BOOK_CHAPTERS = 60
"""Chapters of a dense book, whatever its size; it is assembled at the last one."""
ITEMS_PER_CHAPTER = 20
"""A book in the seed's proportions has a chapter per 20 items: a larger book has more
chapters, not fuller ones."""
_BOOK_KINDS: tuple[tuple[str, float], ...] = (
    ("summary", 0.30), ("world", 0.20), ("character", 0.12), ("foreshadowing", 0.10),
    ("relationship_state", 0.10), ("plot", 0.06), ("act_summary", 0.04), ("style", 0.02),
    ("exemplar", 0.02), ("anti_exemplar", 0.02), ("emotional_directive", 0.02))
"""The mix of a dense book's items (the scene plan is one item on its own); a book in the
seed's proportions has the same mix without ``summary``, and one summary per chapter."""


def book_chapters(items: int, *, dense: bool) -> int:
    """The chapters of a book of ``items`` items: the last is the current one."""
    return BOOK_CHAPTERS if dense else -(-(items - 1) // ITEMS_PER_CHAPTER)


def book_item(rng: random.Random, number: int, kind: str, chapters: int = BOOK_CHAPTERS,
              chapter: int | None = None) -> Event:
    """Item ``number`` of a book of ``chapters`` chapters: a short text of its kind, with
    the flags it has (a summary's ``chapter``, if not given, cycles through the book)."""
    flags: dict[str, Any] = {}
    if kind == "summary":
        flags["chapter"] = chapter if chapter is not None else 1 + number % chapters
    elif kind == "character":
        flags = {"in_scene": rng.random() < 0.02, "pov": number == 0}
    elif kind == "relationship_state":
        flags = {"in_scene": rng.random() < 0.02, "evolving": rng.random() < 0.2,
                 "chapter": rng.randint(1, chapters)}
    elif kind == "foreshadowing":
        flags["active"] = rng.random() < 0.3
    low, high = (80, 200) if kind in ("character", "world") else (20, 80)
    return {"type": "item.put", "data": {"item_id": f"{kind}-{number:05d}", "kind": kind,
                                         "content": _text(rng, low, high), **flags}}


def novel_book(items: int, *, seed: int, batch_size: int, dense: bool = False) -> ScopeHistory:
    """A book of exactly ``items`` distinct items (one ``item.put`` each, one scene plan
    among them), at its last chapter (``book_chapters``): tiers well over their budgets
    at 5,000.

    In the seed's proportions (the default), the book is written chapter by chapter: a
    chapter's summary, then ``ITEMS_PER_CHAPTER - 1`` items of the other kinds. The seed
    sizes a chapter summary at ~1,000 tokens and gives warm 25,000 for a 5-chapter
    window with relationship states, plot and foreshadowing: one summary per chapter.
    So a chapter move re-tiers about as many summaries at any size. ``dense`` is the
    stress shape: ``BOOK_CHAPTERS`` chapters whatever the size, 30% of the items
    summaries (25 per chapter at 5,000), so a move re-tiers a share of the whole book."""
    rng = random.Random(seed * 7_919 + items)
    chapters = book_chapters(items, dense=dense)
    mix = _BOOK_KINDS if dense else tuple(
        (kind, weight) for kind, weight in _BOOK_KINDS if kind != "summary")
    kinds = [kind for kind, _ in mix]
    weights = [weight for _, weight in mix]
    out: list[tuple[str, Event]] = [
        (BOOK_SESSION, {"type": "session.started", "data": {
            "scope": BOOK_SCOPE, "title": "Longtide: the book", "agent": "writer"}}),
        (BOOK_SESSION, {"type": "chapter.moved", "data": {"chapter": chapters}}),
        (BOOK_SESSION, {"type": "item.put", "data": {
            "item_id": "scene-plan", "kind": "scene_plan", "evolving": True,
            "content": _text(rng, 60, 120)}})]
    for number in range(items - 1):
        if not dense and number % ITEMS_PER_CHAPTER == 0:
            event = book_item(rng, number, "summary", chapters,
                              chapter=1 + number // ITEMS_PER_CHAPTER)
        else:
            event = book_item(rng, number, rng.choices(kinds, weights)[0], chapters)
        out.append((BOOK_SESSION, event))
    return ScopeHistory("novel", BOOK_SESSION, BOOK_SCOPE, batches_of(out, batch_size))
