"""Brief leg: re-assembling the ``brief`` after one new message costs the same with 10k
snippets in the scope as with 1k, and never re-indexes.

A scope is written with N snippets (1k and 10k; 300 and 1k with ``--quick``), 40
entities and two sources, plus a session with a persona and a few messages. A fresh
``Ledger`` (an application process) assembles once: that first assembly reads every
snippet and builds the BM25 index. Then, repeatedly, one message is appended and the
brief assembled again: the read view finds the process's index still matching the
scope's latest snippet event and loads no snippet, so the work is the query and the
scoring. Sizes are interleaved round by round; the table shows the median warm
re-assembly at the larger size against the smaller one (<= 1.5x) and how many index
builds the re-assemblies caused (= 0).
"""

from __future__ import annotations

import statistics
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from legs_append import ledger_url
from legs_assemble import StepClock, size_label
from registry import AtMostTimesPeer, Comparison, Context, Exactly, Measure, leg

import ctxledger.assembler.profiles.brief.profile as brief_profile
from ctxledger import Ledger

FULL_SIZES = (1_000, 10_000)
QUICK_SIZES = (300, 1_000)
FULL_REPEATS = 30
QUICK_REPEATS = 3
START = datetime(2026, 2, 1, 9, 0, tzinfo=UTC)
NOW = START + timedelta(days=2)
SESSION = "turn"
WORDS = ("ash", "banner", "cinder", "drum", "ember", "frost", "gate", "harbor", "iron",
         "jade", "keep", "lantern", "mist", "north", "oath", "pike", "quarry", "raven",
         "salt", "tower", "umber", "vigil", "watch", "yew", "zenith", "bridge", "crown",
         "dusk", "fjord", "glade", "hollow", "isle", "marsh", "pass", "ridge", "stone")


def _words(seed: int, count: int) -> str:
    return " ".join(WORDS[(seed * 13 + i * 7 + (seed + i) * i) % len(WORDS)]
                    for i in range(count))


def _scope(snippets: int) -> list[tuple[str, list[dict[str, Any]]]]:
    scope = "scope:bench"
    head: list[dict[str, Any]] = [
        {"type": "source.registered", "data": {"source_id": "lore", "version": "1",
                                               "trust": 0.8, "neutral": True}},
        {"type": "source.registered", "data": {"source_id": "notes", "version": "1",
                                               "trust": 0.5, "neutral": True}}]
    head += [{"type": "entity.put", "data": {
        "entity_id": f"e{e:02d}", "name": f"{_words(e, 2).title()} {e}",
        "facts": [{"text": _words(e * 3 + f, 12), "critical": f == 0} for f in range(3)],
        "tags": ["seen" if e % 2 else "unseen"]}} for e in range(40)]
    batches = [(scope, head)]
    for start in range(0, snippets, 1_000):
        batches.append((scope, [{"type": "snippet.added", "data": {
            "snippet_id": f"s{s:06d}", "source_id": "lore" if s % 3 else "notes",
            "source_version": "1", "text": _words(s, 40), "entities": [f"e{s % 40:02d}"]}}
            for s in range(start, min(snippets, start + 1_000))]))
    batches.append((SESSION, [
        {"type": "session.started", "data": {"scope": "bench"}},
        {"type": "persona.set", "data": {"agent_id": "hero", "knowledge_scope": ["seen"]}},
        *({"type": "message.appended", "data": {"role": "user", "content": _words(m, 20)}}
          for m in range(6))]))
    return batches


def _message(step: int) -> dict[str, Any]:
    return {"type": "message.appended", "data": {"role": "user",
                                                 "content": _words(1_000 + step, 20)}}


@leg("brief", "brief re-assembly after one new message as the snippets grow")
def brief_incremental(ctx: Context) -> list[Comparison]:
    """Warm re-assembly after one new message at each size against the smallest."""
    sizes = QUICK_SIZES if ctx.settings.quick else FULL_SIZES
    repeats = QUICK_REPEATS if ctx.settings.quick else FULL_REPEATS
    clock = StepClock(START)
    ledgers: dict[int, Ledger] = {}
    samples: dict[int, list[float]] = {n: [] for n in sizes}
    per_round: dict[int, list[float]] = {n: [] for n in sizes}
    cold_ms: dict[int, float] = {}
    builds = 0
    try:
        for n in sizes:
            directory = ctx.scratch_root / f"brief-{n}"
            directory.mkdir()
            url = ledger_url(directory)
            with Ledger.open(url, clock=clock) as writer:
                for stream, events in _scope(n):
                    writer.append(stream, events)
            ledgers[n] = Ledger.open(url, clock=clock)
            started = time.perf_counter()
            ledgers[n].assemble(SESSION, "brief", now=NOW)  # cold: reads and indexes all
            cold_ms[n] = (time.perf_counter() - started) * 1e3
        before = brief_profile.MEMO.builds
        step = 0
        for _ in range(ctx.settings.rounds):
            this_round: dict[int, list[float]] = {n: [] for n in sizes}
            for _ in range(repeats):
                for n in sizes:
                    step += 1
                    ledgers[n].append(SESSION, _message(step))
                    started = time.perf_counter()
                    ledgers[n].assemble(SESSION, "brief", now=NOW)
                    this_round[n].append((time.perf_counter() - started) * 1e3)
            for n in sizes:
                samples[n] += this_round[n]
                per_round[n].append(statistics.median(this_round[n]))
        builds = brief_profile.MEMO.builds - before
    finally:
        for ledger in ledgers.values():
            ledger.close()
    small, big = sizes[0], sizes[-1]
    warm = {n: Measure(statistics.median(samples[n]), "ms", tuple(per_round[n]))
            for n in sizes}
    cold = ", ".join(f"{size_label(n)} {ms:,.0f} ms" for n, ms in cold_ms.items())
    note = (f"median of {len(samples[big])} re-assemblies per size, each after one new "
            f"message, sizes interleaved; first (cold, indexing) assembly: {cold}")
    return [
        Comparison("brief", f"brief re-assembly after one new message, {size_label(big)} vs "
                   f"{size_label(small)} snippets", warm[big], f"{size_label(small)} snippets",
                   warm[small], AtMostTimesPeer(1.5), note),
        Comparison("brief", f"brief index builds after new messages at {size_label(big)} "
                   "snippets", Measure(float(builds), "calls"), None, None,
                   Exactly(0, "calls"), "the snippet index is reused, never rebuilt"),
    ]
