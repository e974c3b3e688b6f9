"""The incremental ``novel`` leg: a book of 5,000 items against one of 500.

Each book (``assembly_workload.novel_book``: distinct items, every tier well over its
budget at 5,000) is written, opened in a fresh ``Ledger`` and assembled once (the warm-up
counts every text, or finds the counts in the cache table). Then, step by step and with
the sizes interleaved so background load hits them alike, one new ``item.put`` is
appended and the book re-assembled, then one ``chapter.moved`` (ten chapters back, then
forward again, so summaries change tier every time) and the book re-assembled. Each
re-assembly is timed and its real tokenizer runs counted (``ledger.tokenizer_calls()``).

Two shapes of book:

- **the seed's proportions** (the target rows): one summary per chapter and a chapter
  per 20 items, so the 5,000-item book has 250 chapters, and a move re-tiers about the
  same 20 summaries and relationship states at either size;
- **dense chapters** (reported, no bar): 60 chapters at any size, 30% of the items
  summaries, so at 5,000 items a move re-tiers about 440 of them (a tenth of the book)
  against 44 at 500. Its output changes in ten times as many places, so its time grows
  with the book; the row shows by how much.

Rows: the median re-assembly after an ``item.put`` and after a ``chapter.moved`` at 5,000
items against 500 (<= 1.5x), and the tokenizer calls: exactly 1 after an ``item.put``
(only the new item's text) and 0 after a ``chapter.moved`` (re-tiering reads the
projections and the memoized counts, never the history); then the dense book's move.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from assembly_workload import ScopeHistory, book_chapters, novel_book
from legs_append import ledger_url
from legs_assemble import NOW, StepClock, write
from registry import AtMostTimesPeer, Comparison, Context, Exactly, Measure, Reported, leg
from workload import DEFAULT_SEED

from ctxledger import Ledger

FULL_ITEMS = (500, 5_000)
QUICK_ITEMS = (100, 1_000)
"""Same 10x step, smaller (a smoke run)."""
FULL_STEPS = 20
QUICK_STEPS = 2
"""Re-assemblies per kind of change, size and round."""
TARGET = AtMostTimesPeer(1.5)


@dataclass
class Changes:
    """Per kind of change: the re-assembly times (ms) and tokenizer calls."""

    ms: dict[str, list[float]]
    calls: dict[str, list[int]]


SHAPES = (False, True)
"""The seed's proportions, then dense chapters (``novel_book``'s ``dense``)."""


def _change(kind: str, step: int, chapters: int) -> dict[str, Any]:
    if kind == "item.put":
        return {"type": "item.put", "data": {
            "item_id": f"bench-new-{step:04d}", "kind": "world",
            "content": f"New fact {step}: the causeway floods two hours early at neap."}}
    # Two chapters in turn (ten apart, or down to the first in a --quick book): the
    # window moves and summaries change tier every time.
    return {"type": "chapter.moved", "data": {
        "chapter": max(1, chapters - 10) if step % 2 == 0 else chapters}}


def _items_label(items: int) -> str:
    return f"{items:,}"


@leg("novel", "novel re-assembly after one item.put or chapter.moved, 5,000 vs 500 items")
def novel_incremental(ctx: Context) -> list[Comparison]:
    """Times and tokenizer calls of ``novel`` re-assemblies after one change."""
    sizes = QUICK_ITEMS if ctx.settings.quick else FULL_ITEMS
    steps = QUICK_STEPS if ctx.settings.quick else FULL_STEPS
    books: dict[tuple[bool, int], tuple[str, ScopeHistory]] = {}
    for dense in SHAPES:
        for items in sizes:
            directory = ctx.scratch_root / f"novel-book-{items}{'-dense' if dense else ''}"
            directory.mkdir()
            history = novel_book(items, seed=DEFAULT_SEED, batch_size=1_000, dense=dense)
            books[dense, items] = (ledger_url(directory), history)
            write(books[dense, items][0], history)
    clock = StepClock(NOW - timedelta(minutes=30))
    ledgers = {book: Ledger.open(url, clock=clock) for book, (url, _) in books.items()}
    got = {book: Changes({"item.put": [], "chapter.moved": []},
                         {"item.put": [], "chapter.moved": []}) for book in books}
    stats: dict[tuple[bool, int], str] = {}
    try:
        for book, ledger in ledgers.items():
            first = ledger.assemble(books[book][1].session, "novel", now=NOW)
            stats[book] = first.report.stats  # type: ignore[attr-defined]
        step = 0
        for _ in range(ctx.settings.rounds):
            for _ in range(steps):
                for kind in ("item.put", "chapter.moved"):
                    for (dense, items), ledger in ledgers.items():
                        session = books[dense, items][1].session
                        ledger.append(session, _change(
                            kind, step, book_chapters(items, dense=dense)))
                        before = ledger.tokenizer_calls()
                        start = time.perf_counter()
                        ledger.assemble(session, "novel", now=NOW)
                        got[dense, items].ms[kind].append(
                            (time.perf_counter() - start) * 1e3)
                        got[dense, items].calls[kind].append(
                            ledger.tokenizer_calls() - before)
                step += 1
    finally:
        for ledger in ledgers.values():
            ledger.close()
    small, big = sizes
    rows: list[Comparison] = []

    def times(dense: bool, kind: str) -> dict[int, Measure]:
        return {n: Measure(statistics.median(got[dense, n].ms[kind]), "ms",
                           tuple(got[dense, n].ms[kind])) for n in sizes}

    def books_note(dense: bool) -> str:
        return "; ".join(f"{_items_label(n)} items, {book_chapters(n, dense=dense)} "
                         f"chapters: {stats[dense, n]}" for n in sizes)

    def samples(dense: bool, kind: str) -> str:
        return (f"median of {len(got[dense, big].ms[kind])} re-assemblies per size, each "
                f"after one new {kind}, sizes interleaved, now fixed")

    for kind, calls in (("item.put", 1), ("chapter.moved", 0)):
        measured = times(False, kind)
        rows.append(Comparison(
            "novel", f"novel assembly after one {kind}, {_items_label(big)} vs "
            f"{_items_label(small)} items", measured[big], f"{_items_label(small)} items",
            measured[small], TARGET,
            f"{samples(False, kind)}; the seed's proportions: {books_note(False)}"))
        every = tuple(float(c) for n in sizes for c in got[False, n].calls[kind])
        rows.append(Comparison(
            "novel", f"novel re-assembly of {_items_label(big)} items after one {kind}",
            Measure(max(got[False, big].calls[kind]), "calls", every), None, None,
            Exactly(calls, "calls"),
            "tokenizer runs per re-assembly, every one at both sizes (count x calls): "
            + "; ".join(f"{_items_label(n)}: " + ", ".join(
                f"{got[False, n].calls[kind].count(c)} x {c}"
                for c in sorted(set(got[False, n].calls[kind]))) for n in sizes)))
    dense_moves = times(True, "chapter.moved")
    rows.append(Comparison(
        "novel", f"novel assembly after one chapter.moved, dense chapters, "
        f"{_items_label(big)} vs {_items_label(small)} items", dense_moves[big],
        f"{_items_label(small)} items", dense_moves[small], Reported(),
        f"{samples(True, 'chapter.moved')}; dense chapters (a move re-tiers a tenth of "
        f"the book): {books_note(True)}; tokenizer runs after its moves: "
        f"{max(max(got[True, n].calls['chapter.moved']) for n in sizes)} at most"))
    return rows
