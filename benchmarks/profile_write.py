"""Where the write path's Python time goes: single appends, 1,000-event batches, chat turns.

    python benchmarks/profile_write.py [--single N] [--events N] [--turns N] [--top K]

Each scenario runs under cProfile on a fresh SQLite ledger (WAL, every built-in projection
inline), on the benchmark's seeded mix. The report groups the cumulative time of the calls
that matter into buckets (validation, canonical JSON, hashing, projection reducers,
SQL execution, the read view) so a change is judged on the same split; ``--top`` also
prints the heaviest functions by own time. A profiler slows Python several times more
than it slows SQLite: read the shares, not the absolute rates (those are ``run.py``'s).
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from workload import DEFAULT_SEED, FULL_EVENTS, generate_mix

from ctxledger import Ledger

# (bucket, (file fragment, function name)): cumulative time of the first match counted.
# Buckets may nest (validation includes canonical JSON of the event's data); the report
# says which.
BUCKETS: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = (
    ("whole append (EventLog.append)", (("store/log.py", "append"),)),
    ("validation (EventLog.prepare: schema, ids, canonical JSON)",
     (("store/log.py", "prepare"),)),
    ("... of which canonical JSON", (("store/canonical.py", "canonical_json"),)),
    ("hashing (hash chain)", (("store/hash_chain.py", "event_hash"),)),
    ("projection reducers + their SQL (apply_inline)",
     (("projections/runner.py", "apply_inline"),)),
    ("... of which the reducers (dispatch)", (("projections/runner.py", "dispatch"),)),
    ("... of which the row store's flush", (("projections/rowstore.py", "flush"),)),
    ("SQLAlchemy connection / transaction handling",
     (("sqlalchemy/engine/base.py", "begin"), ("sqlalchemy/engine/base.py", "__exit__"),
      ("sqlalchemy/engine/base.py", "_commit_impl"))),
    ("driver execute / executemany (SQLite's own time)",
     (("{method 'execute' of 'sqlite3", ""), ("{method 'executemany' of 'sqlite3", ""))),
    ("driver commit (SQLite's own time)", (("{method 'commit' of 'sqlite3", ""),)),
    ("read view: Ledger.messages", (("_ledger.py", "messages"),)),
    ("read view: events as Agents SDK items", (("openai_agents.py", "item_of"),)),
)


def _stats_rows(stats: pstats.Stats) -> dict[tuple[str, int, str], tuple[Any, ...]]:
    return stats.stats  # type: ignore[attr-defined,no-any-return]


def bucket_times(stats: pstats.Stats) -> list[tuple[str, float, int]]:
    """(bucket, cumulative seconds, calls) per bucket; a built-in counts its own time."""
    rows = _stats_rows(stats)
    out: list[tuple[str, float, int]] = []
    for name, patterns in BUCKETS:
        seconds, calls = 0.0, 0
        for (path, _line, func), (_cc, nc, tt, ct, _callers) in rows.items():
            for fragment, wanted in patterns:
                if fragment.startswith("{"):
                    if path == "~" and func.startswith("<" + fragment[1:]):
                        seconds += tt
                        calls += nc
                elif path.endswith(fragment) and func == wanted:
                    seconds += ct
                    calls += nc
        out.append((name, seconds, calls))
    return out


def profiled(label: str, run: Callable[[], int], top: int) -> None:
    """Run ``run`` (returns events written) under cProfile and print its buckets."""
    profile = cProfile.Profile()
    start = time.perf_counter()
    profile.enable()
    events = run()
    profile.disable()
    wall = time.perf_counter() - start
    stats = pstats.Stats(profile)
    total = sum(tt for (_cc, _nc, tt, _ct, _c) in _stats_rows(stats).values())
    print(f"\n== {label}: {events:,} events, {wall:.2f} s under the profiler "
          f"({total:.2f} s profiled)")
    for name, seconds, calls in bucket_times(stats):
        share = 100 * seconds / total if total else 0.0
        print(f"  {name:<55} {seconds:7.3f} s {share:5.1f}%  {calls:>9,} calls")
    if top:
        print(f"  -- top {top} by own time --")
        stats.sort_stats("tottime").print_stats(top)


def main(argv: list[str] | None = None) -> int:
    """Profile the three write scenarios and print where their time goes."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--single", type=int, default=3_000,
                        help="events written one per transaction")
    parser.add_argument("--events", type=int, default=20_000,
                        help="events written in 1,000-event batches")
    parser.add_argument("--turns", type=int, default=2_000,
                        help="turns of the chat before the profiled ones (grown untimed)")
    parser.add_argument("--timed-turns", type=int, default=20,
                        help="profiled chat turns through LedgerSession")
    parser.add_argument("--top", type=int, default=0, help="also print the K heaviest "
                        "functions by own time")
    parser.add_argument("--only", choices=("single", "batch", "turn"), action="append")
    args = parser.parse_args(argv)
    only = set(args.only or ("single", "batch", "turn"))
    # The benchmark's own mix (its batches are cut from the full one).
    mix = generate_mix(max(FULL_EVENTS, args.single, args.events), seed=DEFAULT_SEED)
    with tempfile.TemporaryDirectory(prefix="ctxledger-profile-") as scratch:
        root = Path(scratch)
        if "single" in only:
            with Ledger.open(f"sqlite:///{root / 'single.db'}") as ledger:
                inputs = [(e.stream_id, e.as_input()) for e in mix[:args.single]]

                def single() -> int:
                    for stream, item in inputs:
                        ledger.append(stream, item)
                    return len(inputs)

                profiled("single appends (one transaction each)", single, args.top)
        if "batch" in only:
            # Imported here: the batch layout is the benchmark's own (one stream a batch).
            from legs_append import batch_inputs

            with Ledger.open(f"sqlite:///{root / 'batch.db'}") as ledger:
                chunks = [(f"batch-{k // 1000:03d}", batch_inputs(mix[k:k + 1000]))
                          for k in range(0, args.events, 1000)]

                def batches() -> int:
                    for stream, items in chunks:
                        ledger.append(stream, items)
                    return sum(len(items) for _, items in chunks)

                profiled("1,000-event batches", batches, args.top)
        if "turn" in only:
            from legs_chat_peers import agent_items, chat_turns

            from ctxledger.integrations.openai_agents import LedgerSession

            with Ledger.open(f"sqlite:///{root / 'turn.db'}") as ledger:
                session = LedgerSession(ledger, "chat")
                turns = [agent_items(k, u, r) for k, (u, r) in
                         enumerate(chat_turns(args.turns + args.timed_turns))]
                for start in range(0, args.turns, 500):  # grown untimed
                    session.add([i for t in turns[start:min(args.turns, start + 500)]
                                 for i in t])

                def turn_loop() -> int:
                    # The sync twins of get_items/add_items: a profiler sees one thread.
                    for items in turns[args.turns:]:
                        session.items()
                        session.add(items)
                    return 2 * int(args.timed_turns)

                profiled(f"chat turns at {args.turns:,} turns (LedgerSession: read the "
                         "history, add two items)", turn_loop, args.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
