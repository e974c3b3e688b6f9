"""Cold assembly leg: the first assembly in a new process, as the history grows.

An application process that starts (a worker, a CLI call, a restarted server) opens the
ledger and assembles once, with no cache in memory. The history is ``assembly_workload``'s
card chat (messages, tool uses, settings, summaries, retractions) at 1k and 100k events,
with two session settings appended last: ``compression_level`` none and
``context_limit`` 8,192, so the context is the chat history trimmed to the limit, the
case the history window makes O(window).

Each measurement is a new Python process (``cold_assemble.py``) timing ``Ledger.open`` and
then one ``assemble``; interpreter start and imports are outside the clocks. The
databases are written first and assembled once in a process of their own (untimed), so
the token-count cache holds what the application would have stored long ago; the timed
processes then alternate between the sizes. The figure is the median over the processes.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

from assembly_workload import CARD_SESSION, card_chat
from legs_append import ledger_url
from legs_assemble import MAX_BATCH, MIN_APPENDS, NOW, SPAN, START, StepClock, size_label, write
from registry import AtMostTimesPeer, Comparison, Context, Measure, leg
from workload import DEFAULT_SEED

from ctxledger import Ledger

FULL_SIZES = (1_000, 100_000)
QUICK_SIZES = (300, 1_000)
FULL_PROCESSES = 5
QUICK_PROCESSES = 2
CONTEXT_LIMIT = 8_192
TARGET = AtMostTimesPeer(1.5)
SCRIPT = Path(__file__).resolve().parent / "cold_assemble.py"
TRAILING = (
    {"type": "setting.changed", "data": {"key": "compression_level", "value": "none"}},
    {"type": "setting.changed", "data": {"key": "context_limit", "value": CONTEXT_LIMIT}},
)
"""Appended to the chat last; they win over the generator's own settings at every size."""


@contextmanager
def history(ctx: Context, events: int) -> Iterator[str]:
    """A card chat of exactly ``events`` events with the leg's settings; yields its URL."""
    with ctx.fresh_dir(f"cold-{events}") as directory:
        batch = max(1, min(MAX_BATCH, events // MIN_APPENDS))
        chat = card_chat(events - len(TRAILING), seed=DEFAULT_SEED, batch_size=batch)
        url = ledger_url(directory)
        write(url, chat)
        with Ledger.open(url, clock=StepClock(START + SPAN + timedelta(minutes=1))) as ledger:
            ledger.append(CARD_SESSION, list(TRAILING))
            if ledger.head() != events:
                raise RuntimeError(f"wrote {ledger.head()} events, expected {events}")
        yield url


def cold_process(url: str) -> dict[str, Any]:
    """Run one new process that opens ``url`` and assembles the chat once."""
    done = subprocess.run(
        [sys.executable, str(SCRIPT), url, CARD_SESSION, "card", NOW.isoformat()],
        capture_output=True, text=True, check=False, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"cold_assemble.py failed: {done.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


@leg("cold", "first assembly in a new process (Ledger.open + assemble), 100k vs 1k events")
def cold(ctx: Context) -> list[Comparison]:
    """Median cold assembly (and open) per size, over new processes, sizes alternating."""
    sizes = QUICK_SIZES if ctx.settings.quick else FULL_SIZES
    processes = QUICK_PROCESSES if ctx.settings.quick else FULL_PROCESSES
    with ExitStack() as stack:
        urls = {events: stack.enter_context(history(ctx, events)) for events in sizes}
        first = {events: cold_process(url) for events, url in urls.items()}
        runs: dict[int, list[dict[str, Any]]] = {events: [] for events in sizes}
        for index in range(processes):
            order = sizes if index % 2 == 0 else tuple(reversed(sizes))
            for events in order:
                runs[events].append(cold_process(urls[events]))
    small, big = sizes[0], sizes[-1]

    def median(events: int, key: str) -> Measure:
        values = [run[key] for run in runs[events]]
        return Measure(statistics.median(values), "ms", tuple(values))

    detail = "; ".join(
        f"{size_label(n)}: open {median(n, 'open_ms').value:,.1f} ms, assemble "
        f"{median(n, 'assemble_ms').value:,.1f} ms, context {runs[n][0]['messages']:,} msgs / "
        f"{runs[n][0]['tokens']:,} tokens, tokenizer calls "
        f"{'+'.join(str(run['tokenizer_calls']) for run in runs[n])}; very first assembly "
        f"of the database {first[n]['assemble_ms']:,.0f} ms" for n in sizes)
    note = (f"card chat, compression none, context_limit {CONTEXT_LIMIT:,}; median of "
            f"{processes} new processes per size, sizes alternating; imports excluded; {detail}")
    return [Comparison("cold", f"cold assembly (new process) at {size_label(big)} vs "
                       f"{size_label(small)} events", median(big, "assemble_ms"),
                       f"{size_label(small)} events", median(small, "assemble_ms"), TARGET,
                       note)]
