"""Profile ``novel`` assembled from a state kept across assemblies (issue #9).

One code path for every assembly: a ``BookState`` (the tiers as sorted lists, each with
its cut, the report's rows, the kept items' decisions, all with their canonical JSON)
is brought up to the view by the items that changed, then read out. A cold assembly
(no memo, or a new policy) starts from an empty state and adds every item; a warm one
(the state the session's memo kept) adds, removes and re-prepares only the items the
log changed or whose context (chapter, scene plan, arc, first exemplar) changed. So warm
equals cold by construction, and the tests compare them byte for byte anyway.

Why it is exact:

- An item's tier, priority, section and details (``Prepared``) are a pure function of
  the item, the policy and its context; an item whose context did not change keeps its
  ``Prepared``. A chapter move re-prepares only the summaries whose values can change
  (chapters from ``min(old, new) - reach`` to ``max(old, new) - 1``, where ``reach`` is
  how far back a summary's tier or priority still depends on the chapter) and the
  relationship states of the old and new chapter.
- A tier's shedding (drop the lowest rank first while over budget) keeps the longest
  prefix of its rank order that fits, because a prefix's size never decreases as it
  grows. The cut is moved from where it was: back while the prefix is over, forward
  while the next item fits; wherever it starts, it ends on that longest prefix. Hot
  keeps what it may never drop and sheds its emotional directives, then its promoted
  relationship states: the same prefix rule over those, in keep order.
- In warm and cold an item is kept exactly when it ranks before the cut, so the row it
  shows follows from where it stands: the tier keeps its rows in rank order, edited
  with every change and every move of the cut (``ShownRanked``). After a re-sort the
  kept decisions are read again from the cuts rather than placed one by one.
- The range decision ``<tier>:dropped`` is made here, by the code that moves the cut.

Memos are never hashed: the digest is one SHA-256 over the canonical JSON, whose parts
(decisions, sections, report rows) are joined from each object's canonical JSON, the
same bytes as serializing the whole (``digest.seal_known``).
"""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from itertools import accumulate, filterfalse, repeat, takewhile
from operator import add, attrgetter, itemgetter
from typing import Any, cast

from ctxledger.assembler.digest import (
    Fragment,
    array_fragment,
    canonical_text,
    json_object,
    object_fragment,
    seal_known,
)
from ctxledger.assembler.engine import Candidate, Engine, EngineError, detail_values
from ctxledger.assembler.model import (
    Assembly,
    Decision,
    DetailScalar,
    DetailValue,
    Section,
    SectionItem,
    TokenTotals,
)
from ctxledger.assembler.profiles.novel.policy import TIERS, NovelPolicy
from ctxledger.assembler.profiles.novel.profile import (
    Placement,
    assign_tier,
    dropped_item,
    priority_of,
    rank_key,
    stats_line,
    summary_window,
)
from ctxledger.assembler.profiles.novel.report import NovelItemRow, NovelReport, TierReport
from ctxledger.assembler.tokens import TokenCounter
from ctxledger.projections.view import Item, SessionView
from ctxledger.store.canonical import canonical_json

SECTION_PREFIX = "prefix"
SECTION_SUFFIX = "suffix"
SECTION_TIERS: tuple[tuple[str, str], ...] = (
    (SECTION_PREFIX, "hot"), ("cold", "cold"), ("warm", "warm"), (SECTION_SUFFIX, "hot"))
"""Prompt order: prefix, cold, warm, suffix (with each section's tier)."""
SUFFIX_ORDER = ("exemplar", "anti_exemplar", "emotional_directive", "relationship_state",
                "character")
CHAPTER_KINDS = frozenset({"summary", "relationship_state"})
BULK = 16
"""A tier with more changes than this and than a sixteenth of its items (a first
assembly, a chapter move in a long book) is re-sorted once instead of edited per item."""

Key = tuple[Any, ...]

ITEM_ID = attrgetter("item.item_id")
KEY_ID = itemgetter(-1)
KEY_PRIORITY = itemgetter(-3)
RANK = attrgetter("rank")
TEXT = attrgetter("candidate.text")
TOKENS = attrgetter("candidate.tokens")
POSITION = attrgetter("item.position")
ROW_IN, ROW_IN_JSON = attrgetter("row_in"), attrgetter("row_in_json")
ROW_OUT, ROW_OUT_JSON = attrgetter("row_out"), attrgetter("row_out_json")
DECISION, DECISION_JSON = attrgetter("decision"), attrgetter("decision_json")
LAID, LAID_JSON = attrgetter("section_item"), attrgetter("section_item_json")
"""Getters mapped in C over thousands of items."""


def native_json(model: Decision | NovelItemRow | SectionItem) -> str:
    """Canonical JSON of a model whose fields are JSON values already."""
    return canonical_json(model.__dict__)


@dataclass(slots=True, eq=False)
class Prepared:
    """What an item contributes before any budget: a pure function of the item, the
    policy and its context. Its decision, section item and rows are made on first use
    (each with its canonical JSON) and kept with it."""

    item: Item
    tier: str
    reason: str
    promoted: bool
    priority: int
    section: str
    rank: tuple[int, int, str]
    detail: Mapping[str, DetailValue]
    candidate: Candidate
    method: str
    droppable: bool
    """Hot may drop it: an emotional directive or a promoted relationship state."""
    decision: Decision | None = None
    decision_json: str = ""
    section_item: SectionItem | None = None
    section_item_json: str = ""
    row_in: NovelItemRow | None = None
    """The report row when it is kept (laid out in its section), made by ``ready``."""
    row_in_json: str = ""
    row_out: NovelItemRow | None = None
    """The report row when it is dropped."""
    row_out_json: str = ""

    def same_as(self, other: Prepared) -> bool:
        """``other`` (the item under another context) says exactly what this says, so
        nothing that shows either changes."""
        return (self.item is other.item and self.tier == other.tier
                and self.reason == other.reason and self.priority == other.priority
                and self.section == other.section and self.promoted == other.promoted
                and self.detail == other.detail)

    def takes_place_of(self, other: Prepared) -> bool:
        """It ranks exactly where ``other`` (the same item under another context) ranks,
        in warm or cold, so it can be swapped in without moving anything: only what
        its decision says differs (a summary's reason when the chapter moves)."""
        return (self.item is other.item and self.tier == other.tier != "hot"
                and self.rank == other.rank and self.section == other.section
                and self.method == other.method)

    def drop_key(self) -> Key:
        """Keep order among hot's droppables: promoted relationship states, then
        emotional directives, each by rank (so the directives are dropped first)."""
        return (1 if self.item.kind == "emotional_directive" else 0, *self.rank)

    def suffix_key(self) -> Key:
        """Order in the suffix: by the sandwich's kind order, then by rank."""
        return (SUFFIX_ORDER.index(self.item.kind), *self.rank)

    def kept_decision(self) -> Decision:
        """The ``included`` decision of the item (made once, with ``decision_json``)."""
        if self.decision is None:
            made = Decision(item=self.item.item_id, section=self.section, action="included",
                            reason=self.reason, priority=self.priority,
                            detail=dict(self.detail))
            self.decision, self.decision_json = made, native_json(made)
        return self.decision

    def laid_out(self) -> SectionItem:
        """The item as a section lists it (made once, with ``section_item_json``)."""
        if self.section_item is None:
            made = SectionItem(id=self.item.item_id, tokens=self.candidate.tokens,
                               chars=len(self.candidate.text))
            self.section_item, self.section_item_json = made, native_json(made)
        return self.section_item

    def ready(self) -> None:
        """Make both report rows (kept, dropped): a tier's rows are then read out in C
        from where its cut stands, whatever the item's status."""
        if self.row_in is None:
            self.row_in, self.row_in_json = self._row(self.section)
            self.row_out, self.row_out_json = self._row(None)

    def _row(self, placement: str | None) -> tuple[NovelItemRow, str]:
        made = NovelItemRow(
            item_id=self.item.item_id, kind=self.item.kind, tier=self.tier,
            priority=self.priority, tokens=self.candidate.tokens,
            status="included" if placement is not None else "dropped",
            placement=placement, promoted=self.promoted)
        return made, native_json(made)


class Ranked:
    """Prepared items sorted by a key (a total order); ``cut`` of them, from the start,
    are kept. Only the keys and the items are stored (and, in warm and cold, their ids
    and rows: ``ShownRanked``), so that a change costs a few list inserts or deletes;
    what a read-out needs of every item is mapped in C."""

    __slots__ = ("all_tokens", "cut", "kept_tokens", "kept_version", "keys", "preps", "rows",
                 "version")

    def __init__(self) -> None:
        self.keys: list[Key] = []
        self.preps: list[Prepared] = []
        self.cut = 0
        self.kept_tokens = 0
        self.all_tokens = 0
        self.version = 0
        """Bumped on every change: a shed whose inputs are unchanged is reused."""
        self.kept_version = 0
        """Bumped on every change to the kept prefix: a section that lays it out is
        made again only then."""
        self.rows: tuple[Hashable, list[NovelItemRow], str] | None = None
        """Its report rows in rank order and their JSON joined, and what they were read
        from (``BookState._tier_rows``)."""

    def __len__(self) -> int:
        return len(self.keys)

    def index(self, key: Key) -> int:
        """Where ``key`` is (it must be there)."""
        at = bisect_left(self.keys, key)
        if at == len(self.keys) or self.keys[at] != key:
            raise EngineError(f"{key!r} is not ranked")
        return at

    def add(self, key: Key, prep: Prepared) -> int:
        """Insert ``prep`` at its rank (where, returned); inside the kept prefix it is
        kept."""
        at = bisect_left(self.keys, key)
        if at < len(self.keys) and self.keys[at] == key:
            raise EngineError(f"ranking key {key!r} is not unique: add a tie-breaker")
        self.keys.insert(at, key)
        self.preps.insert(at, prep)
        tokens = prep.candidate.tokens
        self.all_tokens += tokens
        if at < self.cut:
            self.cut += 1
            self.kept_tokens += tokens
            self.kept_version += 1
        self.version += 1
        return at

    def swap(self, key: Key, prep: Prepared) -> int:
        """Put ``prep`` where the item ranked at ``key`` is (same key, same tokens);
        where, returned."""
        at = self.index(key)
        self.preps[at] = prep
        self.version += 1
        if at < self.cut:
            self.kept_version += 1
        return at

    def remove(self, key: Key) -> int:
        """Take the item ranked at ``key`` out; where it was, returned."""
        at = self.index(key)
        tokens = self.preps[at].candidate.tokens
        del self.keys[at], self.preps[at]
        self.all_tokens -= tokens
        if at < self.cut:
            self.cut -= 1
            self.kept_tokens -= tokens
            self.kept_version += 1
        self.version += 1
        return at

    def bulk(self, gone: set[Prepared], arriving: list[Prepared]) -> None:
        """Take ``gone`` out and put ``arriving`` in at once: one sort of two sorted runs
        (linear in C), the cut back to nothing (``fit`` moves it). Keys end in the item
        id, one item per id, so they are unique without a check."""
        kept = list(filterfalse(gone.__contains__, self.preps)) if gone else self.preps
        preps = kept + arriving
        preps.sort(key=RANK)
        self.preps = preps
        self.keys = list(map(RANK, preps))
        self.cut = self.kept_tokens = 0
        self.all_tokens += sum(map(TOKENS, arriving)) - sum(map(TOKENS, gone))
        self.version += 1
        self.kept_version += 1

    def dropped_ids(self) -> list[str]:
        """The ids past the cut, in drop order (the lowest rank first): read from the
        keys, which end in the item id."""
        ids = list(map(KEY_ID, self.keys[self.cut:]))
        ids.reverse()
        return ids

    def dropped_priorities(self) -> tuple[int, int]:
        """The lowest and highest priority past the cut (keys hold ``-priority`` third
        from the end; this order need not be by priority first, as hot's keep order)."""
        negated = list(map(KEY_PRIORITY, self.keys[self.cut:]))
        return -max(negated), -min(negated)

    def refit(self, limit: int, separator: int, first_free: int, base_items: int = 0,
              base_tokens: int = 0) -> None:
        """``fit`` from nothing (after ``bulk``), in C: the prefix sizes grow with the
        prefix, so the longest that fits ends before the first running sum over the room."""
        room = limit - base_tokens - separator * base_items + first_free
        # The running sums never decrease: the prefix that fits is read up to the first
        # sum over, not summed to the end (none kept when even the first is over).
        shares = list(takewhile(room.__ge__, accumulate(
            map(add, map(TOKENS, self.preps), repeat(separator)))))
        cut = len(shares)
        self.cut = cut
        self.kept_tokens = shares[cut - 1] - separator * cut if cut else 0
        self.version += 1
        self.kept_version += 1

    def fit(self, limit: int, separator: int, first_free: int, base_items: int = 0,
            base_tokens: int = 0) -> list[Prepared]:
        """Move the cut to the longest prefix that fits ``limit`` (with ``base_items``
        that are always kept); the items that crossed it."""
        moved: list[Prepared] = []
        preps = self.preps
        cut, kept = self.cut, self.kept_tokens

        def size(count: int, item_tokens: int) -> int:
            count += base_items
            return item_tokens + base_tokens + separator * count - first_free if count else 0

        while cut > 0 and size(cut, kept) > limit:
            cut -= 1
            kept -= preps[cut].candidate.tokens
            moved.append(preps[cut])
        while cut < len(preps) and size(cut + 1, kept + preps[cut].candidate.tokens) <= limit:
            kept += preps[cut].candidate.tokens
            moved.append(preps[cut])
            cut += 1
        if cut != self.cut:
            self.version += 1
            self.kept_version += 1
        self.cut, self.kept_tokens = cut, kept
        return moved


class ShownRanked(Ranked):
    """A warm or cold tier. Its items are kept exactly when they rank before the cut, so
    the report rows they show (``row_in`` before it, ``row_out`` after) are kept in step
    with every change, in rank order, and read out with one join."""

    __slots__ = ("ids", "row_models", "row_texts")

    def __init__(self) -> None:
        super().__init__()
        self.ids: list[str] = []
        """The items' ids in rank order (a dropped tail's range decision lists them)."""
        self.row_models: list[NovelItemRow | None] = []
        self.row_texts: list[str] = []

    def add(self, key: Key, prep: Prepared) -> int:
        """``Ranked.add``, with the row it shows."""
        at = super().add(key, prep)
        kept = at < self.cut
        self.ids.insert(at, prep.item.item_id)
        self.row_models.insert(at, prep.row_in if kept else prep.row_out)
        self.row_texts.insert(at, prep.row_in_json if kept else prep.row_out_json)
        return at

    def swap(self, key: Key, prep: Prepared) -> int:
        """``Ranked.swap``, with the row it shows."""
        at = super().swap(key, prep)
        kept = at < self.cut
        self.row_models[at] = prep.row_in if kept else prep.row_out
        self.row_texts[at] = prep.row_in_json if kept else prep.row_out_json
        return at

    def remove(self, key: Key) -> int:
        """``Ranked.remove``, with its row."""
        at = super().remove(key)
        del self.ids[at], self.row_models[at], self.row_texts[at]
        return at

    def refit(self, limit: int, separator: int, first_free: int, base_items: int = 0,
              base_tokens: int = 0) -> None:
        """``Ranked.refit``; every row read again (after ``bulk``)."""
        super().refit(limit, separator, first_free, base_items, base_tokens)
        self.ids = list(map(ITEM_ID, self.preps))
        self._reread(0, len(self.preps), whole=True)

    def fit(self, limit: int, separator: int, first_free: int, base_items: int = 0,
            base_tokens: int = 0) -> list[Prepared]:
        """``Ranked.fit``; the rows of the items the cut moved over read again."""
        old = self.cut
        moved = super().fit(limit, separator, first_free, base_items, base_tokens)
        if self.cut != old:
            self._reread(min(old, self.cut), max(old, self.cut))
        return moved

    def dropped_ids(self) -> list[str]:
        """``Ranked.dropped_ids``, one slice of the ids kept in rank order."""
        return self.ids[:self.cut - 1:-1] if self.cut else self.ids[::-1]

    def dropped_priorities(self) -> tuple[int, int]:
        """``Ranked.dropped_priorities`` from the first and last dropped keys: the rank
        order is by priority first."""
        return -KEY_PRIORITY(self.keys[-1]), -KEY_PRIORITY(self.keys[self.cut])

    def _reread(self, low: int, high: int, *, whole: bool = False) -> None:
        # Positions low..high: kept before the cut, dropped from it on.
        preps, middle = self.preps, min(max(self.cut, low), high)
        models: list[NovelItemRow | None] = list(map(ROW_IN, preps[low:middle]))
        models += map(ROW_OUT, preps[middle:high])
        texts: list[str] = list(map(ROW_IN_JSON, preps[low:middle]))
        texts += map(ROW_OUT_JSON, preps[middle:high])
        if whole:
            self.row_models, self.row_texts = models, texts
        else:
            self.row_models[low:high], self.row_texts[low:high] = models, texts


@dataclass(slots=True)
class Shed:
    """A tier's shedding as of the last fit: the figures its report and range decision
    show, and that decision (None when nothing is dropped)."""

    signature: Hashable
    size: int
    fits: bool
    kept: int
    item_tokens: int
    dropped: tuple[Decision, str] | None


class BookState:
    """A session's novel assembly under one policy, kept to be brought up to date."""

    def __init__(self, policy: NovelPolicy, separator_tokens: int) -> None:
        self.policy = policy
        self.separator = separator_tokens
        self.reach = max(policy.warm_window,
                         policy.priorities.summary_base - policy.priorities.summary_min, 0)
        self.items: tuple[Item, ...] = ()
        self.by_id: dict[str, Item] = {}
        self.prepared: dict[str, Prepared] = {}
        self.chapter: int | None = None
        self.plan: str | None = None
        self.arc = False
        self.first_exemplar: str | None = None
        # Items whose context is more than the item: by kind (insertion-ordered dicts,
        # read only through sorted()) and the chapter-dependent ones by chapter.
        self.of_kind: dict[str, dict[str, None]] = {
            kind: {} for kind in ("scene_plan", "exemplar", "emotional_directive")}
        self.by_chapter: dict[tuple[str, int], dict[str, None]] = {}
        # A per-item memo across contexts (alternating chapters hit it).
        self.memo: dict[tuple[int, Hashable], Prepared] = {}
        self.tiers: dict[str, Ranked] = {
            "hot": Ranked(), "warm": ShownRanked(), "cold": ShownRanked()}
        self.drops = Ranked()
        """Hot's droppables in keep order; ``cut`` of them are kept."""
        self.base_items = 0
        self.base_tokens = 0
        """Hot's items that are never dropped."""
        self.suffix = Ranked()
        """The suffix's kept items in layout order."""
        self.in_suffix: dict[str, None] = {}
        self.methods: Counter[str] = Counter()
        self.sheds: dict[str, Shed] = {}
        # The kept items' decisions in put order (the engine's order), kept up to date
        # by ``_place``; their JSON joined is remade only after a change.
        self.kept_at: list[int] = []
        self.kept_decisions: list[Decision] = []
        self.kept_json: list[str] = []
        self.kept_joined: str | None = None
        self.sections: dict[str, tuple[Hashable, Section, str, str]] = {}
        """Per section: (what it was made from, the section, its JSON, its text)."""

    # -- bringing it up to date ---------------------------------------------------------

    def update(self, view: SessionView, engine: Engine, built: list[int]) -> None:
        """Apply what changed since the last view (everything, the first time)."""
        items = view.items
        changed: dict[str, Item | None] = {}
        if items is not self.items and not (len(items) == len(self.items)
                                            and items == self.items):
            old = self.items
            if len(items) >= len(old) and items[:len(old)] == old:
                for item in items[len(old):]:
                    changed[item.item_id] = item
            else:
                now = {id(item): item for item in items}
                before = {id(item): item for item in old}
                for gone in before.keys() - now.keys():
                    changed.setdefault(before[gone].item_id, None)
                for new in now.keys() - before.keys():
                    changed[now[new].item_id] = now[new]
            self.items = items
        kinds: set[str] = set()
        for item_id, found in changed.items():
            kinds.update(item.kind for item in (self.by_id.get(item_id), found) if item)
            self._index(item_id, found)
        engine.counter.prefetch([item.content for item in changed.values() if item])

        chapter = 1 if view.chapter is None else view.chapter
        plans = self.of_kind["scene_plan"]
        # The latest put, ties by item_id (``latest_scene_plan``); the first exemplar:
        # looked for again only when an item of that kind changed.
        plan, arc, first = self.plan, self.arc, self.first_exemplar
        if "scene_plan" in kinds:
            plan = min(plans, key=lambda i: (-self.by_id[i].position, i)) if plans else None
            arc = plan is not None and bool(self.by_id[plan].evolving)
        exemplars = self.of_kind["exemplar"]
        if "exemplar" in kinds:
            first = min(exemplars, key=lambda i: (self.by_id[i].position, i)) \
                if exemplars else None
        again: set[str] = set()
        if self.chapter is not None and chapter != self.chapter:
            low, high = min(chapter, self.chapter), max(chapter, self.chapter)
            # A relationship state's priority reads only whether its chapter is the
            # current one; a summary's values change only from low - reach to high - 1.
            # Those groups are looked up, or the index read through if it is shorter.
            span = range(low - self.reach, high)
            if len(span) + 2 <= len(self.by_chapter):
                groups: Iterable[tuple[str, int]] = (
                    ("relationship_state", low), ("relationship_state", high),
                    *(("summary", number) for number in span))
            else:
                groups = [(kind, number) for kind, number in self.by_chapter
                          if (number in (low, high) if kind == "relationship_state"
                              else number in span)]
            for group in groups:
                ids = self.by_chapter.get(group)
                if ids:
                    again.update(ids)
        if plan != self.plan:
            again.update(plans)
        if arc != self.arc:
            again.update(self.of_kind["emotional_directive"])
        if first != self.first_exemplar:
            again.update(i for i in (first, self.first_exemplar) if i is not None)
        self.chapter, self.plan, self.arc, self.first_exemplar = chapter, plan, arc, first

        preps: dict[str, Prepared | None] = {}
        for item_id in sorted(again.union(changed)):
            current = self.by_id.get(item_id)
            if current is None:
                preps[item_id] = None
                continue
            prep = self._prepare(current, engine, built)
            held = self.prepared.get(item_id)
            # Under another context but the same values (a summary far from either
            # chapter): the held one stays, with its rows and decision.
            preps[item_id] = held if held is not None and prep.same_as(held) else prep
        self._apply(preps)

    def _index(self, item_id: str, item: Item | None) -> None:
        old = self.by_id.pop(item_id, None)
        if old is not None:
            self.of_kind.get(old.kind, {}).pop(item_id, None)
            if old.kind in CHAPTER_KINDS and old.chapter is not None:
                self.by_chapter.get((old.kind, old.chapter), {}).pop(item_id, None)
        if item is not None:
            self.by_id[item_id] = item
            if item.kind in self.of_kind:
                self.of_kind[item.kind][item_id] = None
            if item.kind in CHAPTER_KINDS and item.chapter is not None:
                self.by_chapter.setdefault((item.kind, item.chapter), {})[item_id] = None

    def _prepare(self, item: Item, engine: Engine, built: list[int]) -> Prepared:
        kind = item.kind
        context: Hashable = (
            self.chapter if kind in CHAPTER_KINDS else self.plan if kind == "scene_plan"
            else self.arc if kind == "emotional_directive"
            else item.item_id == self.first_exemplar if kind == "exemplar" else None)
        # By the item's identity: the read view hands the same Item objects on while
        # they are unchanged; the entry holds its item, so the id is not reused meanwhile.
        key = (id(item), context)
        found = self.memo.get(key)
        if found is None or found.item is not item:
            if len(self.memo) > 4 * len(self.by_id) + 256:
                # Bounded: the entries of items no longer in the book (or every one but
                # the current ones, if that is not enough) are let go.
                self.memo = {k: v for k, v in self.memo.items()
                             if self.by_id.get(v.item.item_id) is v.item}
                if len(self.memo) > 2 * len(self.by_id) + 256:
                    self.memo = {k: v for k, v in self.memo.items()
                                 if self.prepared.get(v.item.item_id) is v}
            found = self.memo[key] = prepare(item, self.chapter or 1, self.plan, self.arc,
                                             self.first_exemplar, self.policy,
                                             engine.counter)
            built[0] += 1
        return found

    def _apply(self, preps: Mapping[str, Prepared | None]) -> None:
        touched: list[Prepared] = []
        swaps: list[tuple[Prepared, Prepared]] = []
        leaving: list[tuple[str, Prepared]] = []
        arriving: list[tuple[str, Prepared]] = []
        prepared = self.prepared
        for item_id, new in preps.items():
            old = prepared.get(item_id)
            if old is new:
                continue
            if new is not None:
                new.ready()
                if old is not None and new.takes_place_of(old):
                    swaps.append((old, new))
                    continue
                arriving.append((item_id, new))
            if old is not None:
                leaving.append((item_id, old))
        gone: dict[str, set[Prepared]] = {tier: set() for tier in self.tiers}
        new_in: dict[str, list[Prepared]] = {tier: [] for tier in self.tiers}
        for _, old in leaving:
            gone[old.tier].add(old)
        for _, new in arriving:
            new_in[new.tier].append(new)
        # A tier with many changes (a first assembly, a chapter move in a long book) is
        # re-sorted once, in C, rather than changed item by item.
        bulk = [tier for tier, ranked in self.tiers.items()
                if len(gone[tier]) + len(new_in[tier]) > max(BULK, len(ranked) // 16)]
        for old, new in swaps:
            # Same tier (warm or cold), rank, section and method: only its decision
            # changes, and its row (no re-ranking, even in a tier re-sorted anyway).
            prepared[new.item.item_id] = new
            self.tiers[old.tier].swap(old.rank, new)
            touched.append(new)
        for item_id, old in leaving:
            del prepared[item_id]
            if old.droppable:
                self.drops.remove(old.drop_key())
            elif old.tier == "hot":
                self.base_items -= 1
                self.base_tokens -= old.candidate.tokens
            if item_id in self.in_suffix:
                del self.in_suffix[item_id]
                self.suffix.remove(old.suffix_key())
            if old.tier not in bulk:
                self.tiers[old.tier].remove(old.rank)
            replacement = preps.get(item_id)
            if replacement is None or replacement.method != old.method:
                self.methods[old.method] -= 1
            if replacement is None or replacement.item.position != old.item.position:
                self._decide(old, False)  # else ``_place`` replaces its decision
        for item_id, new in arriving:
            before = prepared.get(item_id)
            prepared[item_id] = new
            if before is None or before.method != new.method:
                self.methods[new.method] += 1
            if new.droppable:
                self.drops.add(new.drop_key(), new)
            elif new.tier == "hot":
                self.base_items += 1
                self.base_tokens += new.candidate.tokens
            if new.tier not in bulk:
                self.tiers[new.tier].add(new.rank, new)
            touched.append(new)
        for tier in bulk:
            self.tiers[tier].bulk(gone[tier], new_in[tier])
        self._fit(touched, bulk)

    def _fit(self, touched: list[Prepared], rescan: list[str]) -> None:
        # Prompt order is prefix, cold, warm, suffix: the tier that opens the prompt has no
        # separator before its first item, so cold and warm are fitted before hot.
        policy, separator = self.policy, self.separator
        cold, warm = self.tiers["cold"], self.tiers["warm"]
        hot_leads = self.plan is not None or self.first_exemplar is not None
        free = separator if not hot_leads else 0
        touched += self._fit_tier(cold, policy.cold_budget, free, "cold" in rescan)
        sheds = {"cold": self._shed("cold", cold, policy.cold_budget, 0, 0, free)}
        free = separator if not hot_leads and not cold.cut else 0
        touched += self._fit_tier(warm, policy.warm_budget, free, "warm" in rescan)
        sheds["warm"] = self._shed("warm", warm, policy.warm_budget, 0, 0, free)
        free = separator if hot_leads or not (cold.cut or warm.cut) else 0
        touched += self.drops.fit(policy.hot_budget, separator, free, self.base_items,
                                  self.base_tokens)
        sheds["hot"] = self._shed("hot", self.drops, policy.hot_budget, self.base_items,
                                  self.base_tokens, free)
        self.sheds = sheds
        prepared = self.prepared
        # Prepared items hash by identity: each distinct one once, in the order met.
        # After a re-sort the kept decisions are read again from the cuts, so only hot's
        # items are placed one by one (for the suffix).
        for prep in dict.fromkeys(touched):
            if prepared.get(prep.item.item_id) is prep and (not rescan or prep.tier == "hot"):
                self._place(prep)
        if rescan:
            self._reread_decisions()

    def _fit_tier(self, ranked: Ranked, limit: int, first_free: int,
                  rescan: bool) -> list[Prepared]:
        # The items whose status the fit changed (none to list after a re-sort: the
        # decisions are read again from the cut).
        if not rescan:
            return ranked.fit(limit, self.separator, first_free)
        ranked.refit(limit, self.separator, first_free)
        return []

    def _place(self, prep: Prepared) -> None:
        # An item whose status may have changed: its decision, its place in the suffix.
        if prep.droppable:
            kept = self.drops.index(prep.drop_key()) < self.drops.cut
        elif prep.tier == "hot":
            kept = True
        else:
            ranked = self.tiers[prep.tier]
            kept = ranked.index(prep.rank) < ranked.cut
        self._decide(prep, kept)
        if prep.tier == "hot" and prep.section == SECTION_SUFFIX:
            item_id = prep.item.item_id
            if kept and item_id not in self.in_suffix:
                self.in_suffix[item_id] = None
                self.suffix.add(prep.suffix_key(), prep)
            elif not kept and item_id in self.in_suffix:
                del self.in_suffix[item_id]
                self.suffix.remove(prep.suffix_key())

    def _kept_drops(self) -> set[Prepared]:
        # Hot's droppables within its cut (Prepared items hash by identity).
        return set(self.drops.preps[:self.drops.cut])

    def _kept(self) -> list[Prepared]:
        """Every kept item: hot's never-dropped ones and kept droppables, and each
        tier's prefix up to its cut (in no particular order)."""
        kept_drops = self._kept_drops()
        kept = [prep for prep in self.tiers["hot"].preps
                if not prep.droppable or prep in kept_drops]
        for tier in ("cold", "warm"):
            ranked = self.tiers[tier]
            kept += ranked.preps[:ranked.cut]
        return kept

    def _reread_decisions(self) -> None:
        # The kept items' decisions in put order, read from the cuts in C (after a
        # re-sort that moved hundreds of items, rather than placing each).
        kept = self._kept()
        kept.sort(key=POSITION)
        for prep in kept:
            if prep.decision is None:
                prep.kept_decision()
        self.kept_at = list(map(POSITION, kept))
        self.kept_decisions = list(map(DECISION, kept))
        self.kept_json = list(map(DECISION_JSON, kept))
        self.kept_joined = None

    def _decide(self, prep: Prepared, kept: bool) -> None:
        # A kept item has its decision in the list, by put position; a dropped one none.
        position = prep.item.position
        at = bisect_left(self.kept_at, position)
        present = at < len(self.kept_at) and self.kept_at[at] == position
        if present and not kept:
            del self.kept_at[at], self.kept_decisions[at], self.kept_json[at]
            self.kept_joined = None
        elif present:
            decision = prep.kept_decision()
            if self.kept_decisions[at] is not decision:
                self.kept_decisions[at], self.kept_json[at] = decision, prep.decision_json
                self.kept_joined = None
        elif kept:
            decision = prep.kept_decision()
            self.kept_at.insert(at, position)
            self.kept_decisions.insert(at, decision)
            self.kept_json.insert(at, prep.decision_json)
            self.kept_joined = None

    def _shed(self, tier: str, ranked: Ranked, limit: int, base_items: int,
              base_tokens: int, first_free: int) -> Shed:
        signature = (ranked.version, ranked.cut, limit, base_items, base_tokens, first_free,
                     self.separator)
        known = self.sheds.get(tier)
        if known is not None and known.signature == signature:
            return known
        separator = self.separator

        def size(count: int, tokens: int) -> int:
            count += base_items
            return tokens + base_tokens + separator * count - first_free if count else 0

        cut = ranked.cut
        used = size(cut, ranked.kept_tokens)
        dropped: tuple[Decision, str] | None = None
        if cut < len(ranked):
            dropped = range_decision(
                tier, ranked.preps[-1].section, ranked.dropped_ids(),
                ranked.dropped_priorities(),
                tokens_dropped=ranked.all_tokens - ranked.kept_tokens, limit=limit,
                size_before=size(len(ranked), ranked.all_tokens), used=used,
                misfit=ranked.preps[cut])
        return Shed(signature, used, used <= limit, base_items + cut,
                    base_tokens + ranked.kept_tokens, dropped)

    # -- reading it out -----------------------------------------------------------------

    def assembly(self, engine: Engine, view: SessionView, now: datetime) -> Assembly:
        """The assembly the state stands for, sealed."""
        policy, counter = self.policy, engine.counter
        cold, warm = self.tiers["cold"], self.tiers["warm"]
        prefix = [self.prepared[i] for i in (self.plan, self.first_exemplar) if i is not None]
        members = {SECTION_PREFIX: prefix, "cold": cold.preps[:cold.cut],
                   "warm": warm.preps[:warm.cut], SECTION_SUFFIX: self.suffix.preps}
        made: dict[Hashable, Hashable] = {
            SECTION_PREFIX: tuple(map(id, prefix)), "cold": (cold.kept_version, cold.cut),
            "warm": (warm.kept_version, warm.cut), SECTION_SUFFIX: self.suffix.version}
        framing_each = counter.count(policy.separator) if policy.separator else 0
        sections: list[Section] = []
        section_json: list[str] = []
        texts: list[str] = []
        opening = True
        for name, tier in SECTION_TIERS:
            if not members[name]:
                continue
            # Remade only when what it shows changed (after a put: one section).
            source = (made[name], opening, framing_each)
            known = self.sections.get(name)
            if known is None or known[0] != source:
                known = self.sections[name] = (source, *self._section(
                    name, tier, members[name], policy.separator, framing_each, opening))
            opening = False
            sections.append(known[1])
            section_json.append(known[2])
            texts.append(known[3])
        text = policy.separator.join(texts)
        order_count = sum(len(part) for part in members.values())
        by_section = {section.name: section.tokens for section in sections}
        tier_tokens: dict[str, int] = {}
        for section in sections:
            tier = section.tier or ""
            tier_tokens[tier] = tier_tokens.get(tier, 0) + section.tokens
        sheds = [self.sheds[tier] for tier in ("cold", "warm", "hot")]
        methods = {method for method, count in self.methods.items() if count > 0}
        if any(shed.dropped is not None for shed in sheds):
            methods.add(counter.measure("").method)  # a range decision has no text
        if policy.separator and order_count > 1:
            methods.add(counter.measure(policy.separator).method)
        totals = TokenTotals(encoding=counter.encoding, sections=by_section, tiers=tier_tokens,
                             framing=0, total=sum(by_section.values()),
                             methods=sorted(methods))
        warnings: list[str] = []
        hot_shed = self.sheds["hot"]
        if not hot_shed.fits:
            warnings.append(
                f"hot tier is {hot_shed.size} tokens, over its budget of "
                f"{policy.hot_budget}: scene plans, exemplars, anti-exemplars and "
                "characters are never dropped or shortened, so it overshoots")
        tier_reports = [self._tier_report(tier) for tier in TIERS]
        # Rank order within each tier, tiers in report order: one list of references.
        rows: list[NovelItemRow] = []
        row_json: list[str] = []
        for tier in TIERS:
            tier_rows, tier_json = self._tier_rows(tier)
            rows += tier_rows
            if tier_json:
                row_json.append(tier_json)
        report = NovelReport.model_construct(
            chapter=self.chapter or 1, moved=view.chapter is not None, scene=view.scene,
            warm_window=policy.warm_window, window=summary_window(self.chapter, policy),
            tiers=tier_reports, total_tokens=sum(tier.tokens for tier in tier_reports),
            total_budget=policy.total_budget, prefix=[p.item.item_id for p in prefix],
            suffix=list(map(ITEM_ID, self.suffix.preps)), items=rows,
            stats=stats_line(tier_reports, policy.total_budget))
        report_parts: dict[str, Fragment] = {
            key: canonical_json(value)
            for key, value in report.model_dump(mode="json", exclude={"items"}).items()}
        report_parts["items"] = array_fragment(row_json)
        # The engine's order: the items in put order (the kept ones: the dropped are
        # covered by their tier's range), then the ranges in the order they were shed.
        if self.kept_joined is None:
            self.kept_joined = ",".join(self.kept_json)
        decisions = list(self.kept_decisions)
        decision_json = [self.kept_joined] if self.kept_joined else []
        for shed in sheds:
            if shed.dropped is not None:
                decisions.append(shed.dropped[0])
                decision_json.append(shed.dropped[1])
        assembly = Assembly.model_construct(
            profile="novel", policy_version=policy.version, session=view.stream_id,
            position=view.position, now=now, text=text, sections=sections, tokens=totals,
            decisions=decisions, warnings=warnings, report=report, digest="")
        return seal_known(assembly, {
            "sections": "[" + ",".join(section_json) + "]",
            "decisions": "[" + ",".join(decision_json) + "]",
            "report": object_fragment(report_parts)})

    @staticmethod
    def _section(name: str, tier: str, members: list[Prepared], separator: str,
                 framing_each: int, opening: bool) -> tuple[Section, str, str]:
        # The separator before an item belongs to that item's section; the item that
        # opens the prompt has none.
        for prep in members:
            if prep.section_item is None:
                prep.laid_out()
        framing = framing_each * (len(members) - 1 if opening else len(members))
        tokens = framing + sum(map(TOKENS, members))
        section = Section.model_construct(name=name, tier=tier,
                                          items=list(map(LAID, members)),
                                          framing_tokens=framing, tokens=tokens)
        made = json_object({
            "framing_tokens": str(framing),
            "items": "[" + ",".join(map(LAID_JSON, members)) + "]",
            "name": canonical_json(name), "tier": canonical_json(tier),
            "tokens": str(tokens)})
        return section, made, separator.join(list(map(TEXT, members)))

    def _tier_rows(self, tier: str) -> tuple[list[NovelItemRow], str]:
        """The rows a tier's items show, in rank order, and their JSON joined by commas:
        read again only after a change. In warm and cold the status is where the item
        stands against the cut; in hot only a droppable past hot's cut is dropped."""
        ranked, drops = self.tiers[tier], self.drops
        source = ((ranked.version, drops.version, drops.cut) if tier == "hot"
                  else (ranked.version, ranked.cut))
        if ranked.rows is None or ranked.rows[0] != source:
            rows: list[Any]
            if tier == "hot":
                kept_drops = self._kept_drops()
                out = [prep.droppable and prep not in kept_drops for prep in ranked.preps]
                rows = [prep.row_out if gone else prep.row_in
                        for prep, gone in zip(ranked.preps, out, strict=True)]
                text = ",".join([prep.row_out_json if gone else prep.row_in_json
                                 for prep, gone in zip(ranked.preps, out, strict=True)])
            else:
                assert isinstance(ranked, ShownRanked)
                rows = ranked.row_models
                text = ",".join(ranked.row_texts)
            ranked.rows = (source, cast("list[NovelItemRow]", rows), text)
        return ranked.rows[1], ranked.rows[2]

    def _tier_report(self, tier: str) -> TierReport:
        shed = self.sheds[tier]
        total = len(self.tiers[tier])
        return TierReport(tier=tier, budget=self.policy.budget(tier),
                          tokens=shed.size, item_tokens=shed.item_tokens,
                          framing_tokens=shed.size - shed.item_tokens, items=shed.kept,
                          dropped=total - shed.kept, over_budget=not shed.fits)


def range_decision(tier: str, section: str, ids: list[str], priorities: tuple[int, int], *,
                   tokens_dropped: int, limit: int, size_before: int, used: int,
                   misfit: Prepared) -> tuple[Decision, str]:
    """The ``<tier>:dropped`` decision over a tier's dropped tail (``ids`` in drop
    order, ``priorities`` their lowest and highest; ``misfit``: the first that did not
    fit), with its canonical JSON."""
    detail: dict[str, DetailValue] = {
        "count": len(ids), "items": cast("list[DetailScalar]", ids),
        "priority_min": priorities[0], "priority_max": priorities[1],
        "tokens_dropped": tokens_dropped, "limit": limit, "unit": "tokens",
        "size_before": size_before, "used": used, "remaining": limit - used,
        "over_budget": used > limit, "first_misfit": misfit.item.item_id,
        "first_misfit_tokens": misfit.candidate.tokens,
        "first_misfit_priority": misfit.priority, **detail_values({"tier": tier})}
    # Built without validating thousands of ids one by one: every value is plain JSON.
    made = Decision.model_construct(item=dropped_item(tier), section=section,
                                    action="dropped", reason=f"{tier}_over_budget",
                                    priority=None, detail=detail)
    fields = {"action": canonical_json("dropped"), "item": canonical_json(made.item),
              "priority": "null", "reason": canonical_json(made.reason),
              "section": canonical_json(section),
              "detail": json_object({key: canonical_text(ids) if key == "items"
                                     else canonical_json(value)
                                     for key, value in detail.items()})}
    return made, json_object(fields)


_PLACEMENTS: dict[Placement, Placement] = {}


def prepare(item: Item, chapter: int, plan: str | None, arc: bool,
            first_exemplar: str | None, policy: NovelPolicy,
            counter: TokenCounter) -> Prepared:
    """An item's tier, priority, section and details under its context."""
    # A few distinct placements for thousands of items: one object each.
    placed = assign_tier(item, chapter, policy, scene_plan=plan)
    placed = _PLACEMENTS.setdefault(placed, placed)
    priority = priority_of(item, chapter, policy, emotional_arc=arc)
    section = (placed.tier if placed.tier != "hot"
               else SECTION_PREFIX if item.kind == "scene_plan"
               or item.item_id == first_exemplar else SECTION_SUFFIX)
    measured = counter.measure(item.content)
    detail: dict[str, int | str | bool | None] = {
        "kind": item.kind, "tier": placed.tier, "tokens": measured.tokens,
        "tier_budget": policy.budget(placed.tier), "put_position": item.position}
    # Only the item's own values: the current chapter and the window are on the report
    # once, so a chapter move changes only the records whose tier or priority it changes.
    if item.kind == "summary":
        detail["chapter"] = item.chapter
    elif item.kind == "relationship_state":
        detail.update({"chapter": item.chapter, "evolving": item.evolving,
                       "promoted": placed.promoted})
    elif item.kind == "emotional_directive":
        detail["emotional_arc"] = arc
    elif item.kind == "scene_plan":
        detail["scene_plan"] = plan
    return Prepared(item, placed.tier, placed.reason, placed.promoted, priority, section,
                    rank_key(priority, item), detail_values(detail),
                    Candidate(item.item_id, section, item.content, measured.tokens,
                              placed.tier, priority), measured.method,
                    droppable=placed.tier == "hot" and (
                        item.kind == "emotional_directive" or placed.promoted))


STATES = 2
"""Book states kept per session (one per policy recently assembled under)."""


def assemble_book(engine: Engine, view: SessionView, now: datetime,
                  policy: NovelPolicy) -> Assembly:
    """The ``novel`` assembly of ``view``: the session memo's state for this policy
    brought up to date (a new state without one), then read out and sealed."""
    memo = engine.memo_for(view.stream_id)
    key = ("novel", canonical_json(policy.model_dump(mode="json")), engine.counter.encoding)
    state = memo.state(key)
    if not isinstance(state, BookState):
        state = BookState(policy, engine.counter.count(policy.separator))
    built = [0]
    try:
        state.update(view, engine, built)
        result = state.assembly(engine, view, now)
    except BaseException:
        # A half-updated state must not be read again: the next assembly starts afresh.
        memo.forget_state(key)
        raise
    memo.keep_state(key, state, STATES)
    memo.built += built[0]
    memo.assembled()
    return result
