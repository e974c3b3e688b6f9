"""The incremental ``novel`` leg (issue #9): a book of 5,000 items against one of 500.

Each book (``assembly_workload.novel_book``: distinct items, every tier well over its
budget at 5,000) is written, opened in a fresh ``Ledger`` and assembled once (the warm-up
counts every text, or finds the counts in the cache table). Then, step by step and with
the sizes interleaved so background load hits them alike, one new ``item.put`` is
appended and the book re-assembled, then one ``chapter.moved`` (alternating between two
chapters, so summaries change tier) and the book re-assembled. Each re-assembly is timed
and its real tokenizer runs counted (``ledger.tokenizer_calls()``).

Rows: the median re-assembly after an ``item.put`` and after a ``chapter.moved`` at 5,000
items against 500 (<= 1.5x), and the tokenizer calls: exactly 1 after an ``item.put``
(only the new item's text) and 0 after a ``chapter.moved`` (re-tiering reads the
projections and the memoized counts, never the history).
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from assembly_workload import BOOK_CHAPTERS, ScopeHistory, novel_book
from legs_append import ledger_url
from legs_assemble import NOW, StepClock, write
from registry import AtMostTimesPeer, Comparison, Context, Exactly, Measure, leg
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


def _change(kind: str, step: int) -> dict[str, Any]:
    if kind == "item.put":
        return {"type": "item.put", "data": {
            "item_id": f"bench-new-{step:04d}", "kind": "world",
            "content": f"New fact {step}: the causeway floods two hours early at neap."}}
    # Two chapters in turn: the window moves and summaries change tier every time.
    return {"type": "chapter.moved", "data": {
        "chapter": BOOK_CHAPTERS - 10 if step % 2 == 0 else BOOK_CHAPTERS}}


def _items_label(items: int) -> str:
    return f"{items:,}"


@leg("novel", "novel re-assembly after one item.put or chapter.moved, 5,000 vs 500 items")
def novel_incremental(ctx: Context) -> list[Comparison]:
    """Times and tokenizer calls of ``novel`` re-assemblies after one change."""
    sizes = QUICK_ITEMS if ctx.settings.quick else FULL_ITEMS
    steps = QUICK_STEPS if ctx.settings.quick else FULL_STEPS
    books: dict[int, tuple[str, ScopeHistory]] = {}
    for items in sizes:
        directory = ctx.scratch_root / f"novel-book-{items}"
        directory.mkdir()
        history = novel_book(items, seed=DEFAULT_SEED, batch_size=1_000)
        books[items] = (ledger_url(directory), history)
        write(books[items][0], history)
    clock = StepClock(NOW - timedelta(minutes=30))
    ledgers = {items: Ledger.open(url, clock=clock) for items, (url, _) in books.items()}
    got = {items: Changes({"item.put": [], "chapter.moved": []},
                          {"item.put": [], "chapter.moved": []}) for items in sizes}
    stats: dict[int, str] = {}
    try:
        for items, ledger in ledgers.items():
            first = ledger.assemble(books[items][1].session, "novel", now=NOW)
            stats[items] = first.report.stats  # type: ignore[attr-defined]
        step = 0
        for _ in range(ctx.settings.rounds):
            for _ in range(steps):
                for kind in ("item.put", "chapter.moved"):
                    for items, ledger in ledgers.items():
                        session = books[items][1].session
                        ledger.append(session, _change(kind, step))
                        before = ledger.tokenizer_calls()
                        start = time.perf_counter()
                        ledger.assemble(session, "novel", now=NOW)
                        got[items].ms[kind].append((time.perf_counter() - start) * 1e3)
                        got[items].calls[kind].append(ledger.tokenizer_calls() - before)
                step += 1
    finally:
        for ledger in ledgers.values():
            ledger.close()
    small, big = sizes
    rows: list[Comparison] = []
    books_note = "; ".join(f"{_items_label(n)} items: {stats[n]}" for n in sizes)
    for kind, calls in (("item.put", 1), ("chapter.moved", 0)):
        samples = len(got[big].ms[kind])
        times = {n: Measure(statistics.median(got[n].ms[kind]), "ms",
                            tuple(got[n].ms[kind])) for n in sizes}
        rows.append(Comparison(
            "novel", f"novel assembly after one {kind}, {_items_label(big)} vs "
            f"{_items_label(small)} items", times[big], f"{_items_label(small)} items",
            times[small], TARGET,
            f"median of {samples} re-assemblies per size, each after one new {kind}, "
            f"sizes interleaved, now fixed; {books_note}"))
        every = tuple(float(c) for n in sizes for c in got[n].calls[kind])
        rows.append(Comparison(
            "novel", f"novel re-assembly of {_items_label(big)} items after one {kind}",
            Measure(max(got[big].calls[kind]), "calls", every), None, None,
            Exactly(calls, "calls"),
            "tokenizer runs per re-assembly, every one at both sizes (count x calls): "
            + "; ".join(f"{_items_label(n)}: " + ", ".join(
                f"{got[n].calls[kind].count(c)} x {c}" for c in sorted(set(got[n].calls[kind])))
                for n in sizes)))
    return rows
