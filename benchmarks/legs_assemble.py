"""Assembly legs: assembling stays flat as the history grows, and re-assembling counts
only what is new (SPEC §7).

``assemble``: the card chat, the project scope and the novel draft of
``assembly_workload`` are written at 1k, 10k and 100k events (1,000-event batches at
most, the ledger's clock spreading them over 30 days), then each is opened in a fresh
``Ledger``, as an application process would, assembled once (the warm-up: it counts
every text once, or finds the counts in the cache table) and then assembled again and
again with ``now`` fixed. The sizes are
interleaved, repetition by repetition, so background load hits them alike; the table
shows the median warm assembly at 10k and 100k against the one at 1k (<= 1.2x).

``reassemble``: on the same databases, a fresh ``Ledger`` assembles once (warm-up), then
assembles again with no new event, then after each of a few new messages (card) or new
observations (session), one at a time. The figure is how many times the tokenizer really
ran (``ledger.tokenizer_calls()``): 0 with nothing new, 1 for the one new text.
The card's new messages are then retracted one by one, newest first (a regenerated
reply), and each re-assembly after a retraction is timed at every size (<= 1.2x).

The databases are built once per run and shared by both legs (``reassemble`` builds them
if it runs alone); ``reassemble`` appends to them, so it runs after ``assemble``.
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from assembly_workload import ScopeHistory, card_chat, novel_draft, project_scope
from legs_append import ledger_url
from registry import AtMostTimesPeer, Comparison, Context, Exactly, Measure, leg
from workload import DEFAULT_SEED

from ctxledger import Ledger

FULL_SIZES = (1_000, 10_000, 100_000)
QUICK_SIZES = (300, 600, 1_000)
"""Tiny, but large enough for both histories' fixed recent part."""
FULL_REPEATS = 100
QUICK_REPEATS = 3
"""Warm assemblies per size and round (the table shows the median of all of them)."""
MAX_BATCH = 1_000
MIN_APPENDS = 50
"""Every history is written in at least this many appends, so its 30 days have as many
distinct timestamps (one per append)."""
START = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
SPAN = timedelta(days=30)
NOW = START + SPAN + timedelta(hours=1)
"""``now`` of every assembly: one hour after the last event."""
FLAT = AtMostTimesPeer(1.2)
PROFILES: dict[str, Callable[..., ScopeHistory]] = {"card": card_chat, "session": project_scope,
                                                    "novel": novel_draft}


class StepClock:
    """The ledger's injectable clock, set by the writer before each append."""

    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        """The time the next append records."""
        return self.now


@dataclass(frozen=True)
class Built:
    """A written history: where it is and what to assemble."""

    url: str
    profile: str
    session: str
    events: int
    counts: dict[str, int]


def size_label(events: int) -> str:
    """``1k``, ``100k``, or the plain number when it is not whole thousands."""
    return f"{events // 1_000}k" if events % 1_000 == 0 else f"{events:,}"


def sizes(ctx: Context) -> tuple[int, ...]:
    """The history sizes of this run."""
    return QUICK_SIZES if ctx.settings.quick else FULL_SIZES


def write(url: str, history: ScopeHistory) -> None:
    """Append ``history`` batch by batch, the clock spreading the batches over ``SPAN``."""
    clock = StepClock(START)
    last = max(1, len(history.batches) - 1)
    with Ledger.open(url, clock=clock) as ledger:
        for index, batch in enumerate(history.batches):
            clock.now = START + SPAN * index / last
            ledger.append(batch.stream_id, batch.events)
        if ledger.head() != history.events:
            raise RuntimeError(f"wrote {ledger.head()} events, expected {history.events}")


_BUILT: dict[tuple[Path, str, int], Built] = {}
"""Databases written in this run, by (scratch root, profile, size)."""


def built(ctx: Context, profile: str, events: int) -> Built:
    """The ``profile`` history of ``events`` events, written on first use."""
    key = (ctx.scratch_root, profile, events)
    if key not in _BUILT:
        directory = ctx.scratch_root / f"assembly-{profile}-{events}"
        directory.mkdir()
        batch = max(1, min(MAX_BATCH, events // MIN_APPENDS))
        history = PROFILES[profile](events, seed=DEFAULT_SEED, batch_size=batch)
        url = ledger_url(directory)
        write(url, history)
        _BUILT[key] = Built(url, profile, history.session, history.events, history.counts())
    return _BUILT[key]


def _calls(ledger: Ledger) -> int:
    """Real tokenizer runs so far, over every encoding's long-lived counter."""
    return ledger.tokenizer_calls()


# -- assemble -------------------------------------------------------------------------------

@dataclass(frozen=True)
class Timing:
    """Warm assembly times of one profile, per size."""

    warm: dict[int, Measure]
    cold_ms: dict[int, float]
    tokens: dict[int, int]


def time_profile(ctx: Context, profile: str) -> Timing:
    """Warm assembly time of ``profile`` at every size, sizes interleaved."""
    targets = [built(ctx, profile, events) for events in sizes(ctx)]
    repeats = QUICK_REPEATS if ctx.settings.quick else FULL_REPEATS
    ledgers = [Ledger.open(target.url) for target in targets]
    try:
        cold_ms: dict[int, float] = {}
        tokens: dict[int, int] = {}
        for target, ledger in zip(targets, ledgers, strict=True):
            start = time.perf_counter()
            first = ledger.assemble(target.session, profile, now=NOW)
            cold_ms[target.events] = (time.perf_counter() - start) * 1e3
            tokens[target.events] = first.tokens.total
        samples: dict[int, list[float]] = {target.events: [] for target in targets}
        per_round: dict[int, list[float]] = {target.events: [] for target in targets}
        gc.collect()
        for _ in range(ctx.settings.rounds):
            this_round: dict[int, list[float]] = {target.events: [] for target in targets}
            for _ in range(repeats):
                for target, ledger in zip(targets, ledgers, strict=True):
                    start = time.perf_counter()
                    ledger.assemble(target.session, profile, now=NOW)
                    this_round[target.events].append((time.perf_counter() - start) * 1e3)
            for events, values in this_round.items():
                samples[events] += values
                per_round[events].append(statistics.median(values))
    finally:
        for ledger in ledgers:
            ledger.close()
    warm = {events: Measure(statistics.median(samples[events]), "ms", tuple(per_round[events]))
            for events in samples}
    return Timing(warm, cold_ms, tokens)


def _flat_rows(ctx: Context, profile: str, timing: Timing, what: str) -> list[Comparison]:
    small, *larger = sizes(ctx)
    repeats = QUICK_REPEATS if ctx.settings.quick else FULL_REPEATS
    samples = repeats * ctx.settings.rounds
    cold = ", ".join(f"{size_label(n)} {ms:,.0f} ms" for n, ms in timing.cold_ms.items())
    context = sorted(set(timing.tokens.values()))
    shape = (f"{context[0]:,} tokens" if len(context) == 1
             else "/".join(f"{t:,}" for t in timing.tokens.values()) + " tokens")
    mix = built(ctx, profile, larger[-1])
    events = ", ".join(f"{kind} {count:,}" for kind, count in mix.counts.items())
    note = (f"{what}; median of {samples} warm assemblies per size, sizes interleaved, "
            f"now fixed; context {shape}; first (cold) assembly: {cold}; "
            f"the {size_label(mix.events)} history: {events}")
    return [Comparison("assemble", f"{profile} assembly at {size_label(big)} vs "
                       f"{size_label(small)} events", timing.warm[big],
                       f"{size_label(small)} events", timing.warm[small], FLAT, note)
            for big in larger]


@leg("assemble", "warm assembly time as the history grows (card, session, novel)")
def assemble_flat(ctx: Context) -> list[Comparison]:
    """Warm assembly of ``card``, ``session`` and ``novel`` at each size against the
    smallest."""
    rows: list[Comparison] = []
    for profile, what in (("card", "one chat, compression chat_only, a summary every "
                                   "~100 messages"),
                          ("session", "one project scope: ~30 tools, ended sessions, "
                                      "observations"),
                          ("novel", "one draft: ~30 items revised over and over, chat "
                                    "turns and chapter moves between")):
        rows += _flat_rows(ctx, profile, time_profile(ctx, profile), what)
    return rows


# -- reassemble -----------------------------------------------------------------------------

FULL_STEPS = 5
QUICK_STEPS = 2
"""New events per size, each followed by one re-assembly."""


@dataclass(frozen=True)
class Incremental:
    """Tokenizer calls and times of re-assembling one history after small changes."""

    unchanged_calls: int
    changed_calls: list[int]
    """Calls of each re-assembly after one new message (card) or observation (session)."""
    changed_ms: list[float]
    retract_calls: list[int]
    """Card only: calls of each re-assembly after the newest message is retracted."""
    retract_ms: list[float]


def _new_event(profile: str, step: int) -> dict[str, Any]:
    if profile == "card":
        return {"type": "message.appended", "data": {
            "message_id": f"bench-new-{step}", "role": "user", "name": "Alex",
            "content": f"Question {step} before we stop: what was the name of that river?"}}
    return {"type": "observation.recorded", "data": {
        "kind": "finding", "source": "Bash",
        "content": f"Finding {step}: the flaky login test waits on a fixed sleep; polling "
                   "the endpoint fixes it."}}


def _timed_assembly(ledger: Ledger, target: Built) -> tuple[int, float]:
    """(tokenizer calls, milliseconds) of one assembly."""
    before = _calls(ledger)
    start = time.perf_counter()
    ledger.assemble(target.session, target.profile, now=NOW)
    return _calls(ledger) - before, (time.perf_counter() - start) * 1e3


def reassemble_history(target: Built, steps: int) -> Incremental:
    """Warm up, re-assemble with nothing new, then after each of ``steps`` new events (and,
    for the card, after each of ``steps`` retractions of the newest message)."""
    clock = StepClock(NOW - timedelta(minutes=30))
    with Ledger.open(target.url, clock=clock) as ledger:
        ledger.assemble(target.session, target.profile, now=NOW)
        unchanged, _ = _timed_assembly(ledger, target)
        changed: list[tuple[int, float]] = []
        for step in range(steps):
            ledger.append(target.session, _new_event(target.profile, step))
            changed.append(_timed_assembly(ledger, target))
        retracted: list[tuple[int, float]] = []
        if target.profile == "card":
            # A regenerated reply: the newest message is withdrawn (the ones just added).
            for step in reversed(range(steps)):
                ledger.append(target.session, {"type": "message.retracted",
                                               "data": {"message_id": f"bench-new-{step}"}})
                retracted.append(_timed_assembly(ledger, target))
    return Incremental(unchanged, [c for c, _ in changed], [ms for _, ms in changed],
                       [c for c, _ in retracted], [ms for _, ms in retracted])


def _every(counts: dict[int, list[int]]) -> tuple[float, ...]:
    """Every count of every size, flat (the values an ``Exactly`` target judges)."""
    return tuple(float(c) for per_size in counts.values() for c in per_size)


@leg("reassemble", "re-assembly after one new event (tokenizer calls; time after a retraction)")
def reassemble(ctx: Context) -> list[Comparison]:
    """Tokenizer calls of ``card`` and ``session`` re-assemblies at every size, and the
    time of a card re-assembly after a retraction."""
    steps = QUICK_STEPS if ctx.settings.quick else FULL_STEPS
    rows: list[Comparison] = []
    for profile, new in (("card", "one new message"), ("session", "one new observation")):
        got = {n: reassemble_history(built(ctx, profile, n), steps) for n in sizes(ctx)}
        small, big = min(got), max(got)
        detail = "; ".join(
            f"{size_label(n)}: {r.unchanged_calls} / {'+'.join(map(str, r.changed_calls))} "
            f"calls, {statistics.median(r.changed_ms):,.1f} ms" for n, r in got.items())
        note = (f"calls with nothing new / after each of {steps} x {new}, and the median "
                f"re-assembly time after one, per size: {detail}")
        # The figure is the largest size's; every count measured is behind it, judged too.
        unchanged = Measure(got[big].unchanged_calls, "calls",
                            tuple(float(r.unchanged_calls) for r in got.values()))
        changed = Measure(max(got[big].changed_calls), "calls",
                          _every({n: r.changed_calls for n, r in got.items()}))
        rows += [
            Comparison("reassemble", f"{profile} re-assembly at {size_label(big)} events, "
                       "nothing new", unchanged, None, None, Exactly(0, "calls"), note),
            Comparison("reassemble", f"{profile} re-assembly at {size_label(big)} events "
                       f"after {new}", changed, None, None, Exactly(1, "calls"), note),
        ]
        if profile == "card":
            times = {n: Measure(statistics.median(r.retract_ms), "ms", tuple(r.retract_ms))
                     for n, r in got.items()}
            per_size = "; ".join(
                f"{size_label(n)}: {times[n].format()}, "
                f"{'+'.join(map(str, r.retract_calls))} calls" for n, r in got.items())
            rows.append(Comparison(
                "reassemble", f"card re-assembly after a retraction, {size_label(big)} vs "
                f"{size_label(small)} events", times[big], f"{size_label(small)} events",
                times[small], FLAT,
                f"after a retraction of the newest message (a regenerated reply), median of "
                f"{steps} re-assemblies, per size: {per_size}"))
    return rows
