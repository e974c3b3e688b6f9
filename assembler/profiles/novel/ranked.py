"""A tier as a sorted list with a cut: the items before the cut are kept.

A tier's shedding (drop the lowest rank first while over budget) keeps the longest prefix
of its rank order that fits, because a prefix's size never decreases as it grows. The cut
is moved from where it was: back while the prefix is over, forward while the next item
fits; wherever it starts, it ends on that longest prefix. In warm and cold an item is kept
exactly when it ranks before the cut, so the row it shows follows from where it stands:
the tier keeps its rows in rank order, edited with every change and every move of the cut
(``ShownRanked``).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Hashable
from itertools import accumulate, filterfalse, repeat, takewhile
from operator import add, attrgetter, itemgetter

from ctxledger.assembler.errors import EngineError
from ctxledger.assembler.profiles.novel.prepared import Key, Prepared
from ctxledger.assembler.profiles.novel.report import NovelItemRow

ITEM_ID = attrgetter("item.item_id")
KEY_ID = itemgetter(-1)
KEY_PRIORITY = itemgetter(-3)
RANK = attrgetter("rank")
TOKENS = attrgetter("candidate.tokens")
ROW_IN, ROW_IN_JSON = attrgetter("row_in"), attrgetter("row_in_json")
ROW_OUT, ROW_OUT_JSON = attrgetter("row_out"), attrgetter("row_out_json")
"""Getters mapped in C over thousands of items."""


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
        from (``readout._tier_rows``)."""

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
