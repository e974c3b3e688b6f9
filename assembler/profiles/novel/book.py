"""Profile ``novel`` assembled from a state kept across assemblies.

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
from operator import attrgetter

from ctxledger.assembler.decision_engine import Engine
from ctxledger.assembler.model import Decision, Section
from ctxledger.assembler.profiles.novel.policy import NovelPolicy
from ctxledger.assembler.profiles.novel.prepared import Prepared, prepare
from ctxledger.assembler.profiles.novel.ranked import Ranked, ShownRanked
from ctxledger.assembler.profiles.novel.sandwich import SECTION_SUFFIX
from ctxledger.assembler.profiles.novel.shed import Shed, range_decision
from ctxledger.assembler.profiles.novel.tiers import CHAPTER_KINDS, current_chapter
from ctxledger.projections.session_view import Item, SessionView

BULK = 16
"""A tier with more changes than this and than a sixteenth of its items (a first
assembly, a chapter move in a long book) is re-sorted once instead of edited per item."""

POSITION = attrgetter("item.position")
DECISION, DECISION_JSON = attrgetter("decision"), attrgetter("decision_json")
"""Getters mapped in C over the kept items."""


class BookState:
    """A session's novel assembly under one policy, kept to be brought up to date."""

    def __init__(self, policy: NovelPolicy, separator_tokens: int) -> None:
        self.policy = policy
        # What a separator costs the tier budget its item is in: nothing when the policy
        # charges separators to the framing.
        self.separator = separator_tokens if policy.separators == "tier" else 0
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

        chapter = current_chapter(view.chapter)
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
            found = self.memo[key] = prepare(item, current_chapter(self.chapter), self.plan,
                                             self.arc, self.first_exemplar, self.policy,
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

    def kept_drops(self) -> set[Prepared]:
        """Hot's droppables within its cut (``Prepared`` items hash by identity)."""
        return set(self.drops.preps[:self.drops.cut])

    def _kept(self) -> list[Prepared]:
        """Every kept item: hot's never-dropped ones and kept droppables, and each
        tier's prefix up to its cut (in no particular order)."""
        kept_drops = self.kept_drops()
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
