"""ctxledger's benchmark: one script, one run, ctxledger and its peers side by side.

    python benchmarks/run.py [--events N] [--single N] [--rounds R] [--quick] [--json FILE]

Every leg registered in ``registry.LEGS`` runs in a fresh temporary directory on the
same seeded event mix; the table shows each target of SPEC §7 with PASS or MISS.
Targets that are missed do not change the exit code: the figures are the result.
"""

from __future__ import annotations

import argparse
import importlib
import json
import platform
import sqlite3
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

# Run as a script: the helper modules sit next to this file.
sys.path.insert(0, str(Path(__file__).resolve().parent))

from registry import LEGS, Comparison, Context, Settings
from workload import DEFAULT_SEED, FULL_EVENTS, describe_mix, generate_mix

LEG_MODULES = ("legs_append", "legs_rebuild", "legs_assemble", "legs_turnloop", "legs_cold",
               "legs_rollup", "legs_seal",
               "legs_brief", "legs_replay", "legs_novel", "legs_lorebook",
               "legs_startup", "legs_pg_writers", "legs_serve", "legs_erase",
               "legs_witness", "legs_langgraph", "legs_ui", "legs_hook", "legs_bounded",
               "legs_timeline", "legs_tokens", "legs_chat_peers")
"""Modules whose import registers legs, in the order their legs run."""

QUICK = Settings(events=3_000, single_events=600, batch_size=1_000, rounds=1, quick=True,
                 turns=30, peer_turns=30, rollup_events=3_000, checkpoint_steps=30,
                 bounded_messages=40)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=FULL_EVENTS,
                        help="size of the event mix (batches and rebuild use all of it)")
    parser.add_argument("--single", type=int, default=20_000,
                        help="events written one per transaction in the single-append legs")
    parser.add_argument("--rounds", type=int, default=3,
                        help="runs per leg, contenders interleaved; medians are reported")
    parser.add_argument("--batch-size", type=int, default=1_000)
    parser.add_argument("--turns", type=int, default=5_000,
                        help="chat turns of the turnloop leg (ctxledger)")
    parser.add_argument("--peer-turns", type=int, default=2_000,
                        help="chat turns of the turnloop leg's LangGraph peer, compared at "
                             "this turn (its database grows with the square of the turns: "
                             "about 9 GB at 2,000)")
    parser.add_argument("--quick", action="store_true",
                        help="tiny sizes and one round: a smoke run, not a measurement")
    parser.add_argument("--only", action="append", default=None, metavar="LEG",
                        help="run only this leg (repeatable)")
    parser.add_argument("--rollup-events", type=int, default=300_000, metavar="N",
                        help="size of the log the rollup leg rolls up over 30 days")
    parser.add_argument("--replay-log", type=int, default=250_000, metavar="N",
                        help="events in the replay leg's large log (1,000,000 where it fits)")
    parser.add_argument("--checkpoint-steps", type=int, default=2_000, metavar="N",
                        help="steps of the langgraph leg's chat graph (both checkpointers)")
    parser.add_argument("--bounded-messages", type=int, default=5_000, metavar="N",
                        help="messages of the session the bounded leg asks the timeline and"
                             " why of, through the service")
    parser.add_argument("--timeline-why", type=int, default=10_000, metavar="N",
                        help="messages of the live turns the timeline leg asks why over")
    parser.add_argument("--timeline-messages", type=int, default=2_000, metavar="N",
                        help="messages of the timeline leg's long timeline (no context "
                             "limit)")
    parser.add_argument("--timeline-records", type=int, default=1_000, metavar="N",
                        help="recorded assemblies of the session the timeline leg audits")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    parser.add_argument("--json", type=Path, default=None, metavar="FILE",
                        help="also write every figure (each round too) to FILE")
    args = parser.parse_args(argv)
    for name in ("events", "single", "rounds", "batch_size", "rollup_events", "replay_log",
                 "checkpoint_steps", "bounded_messages", "timeline_why",
                 "timeline_messages", "timeline_records"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    for name in ("turns", "peer_turns"):
        if getattr(args, name) < 10:
            parser.error(f"--{name.replace('_', '-')} must be at least 10")
    return args


def settings_from(args: argparse.Namespace) -> Settings:
    """The run's sizes: ``--quick`` overrides the others."""
    if args.quick:
        return QUICK
    return Settings(events=args.events, single_events=min(args.single, args.events),
                    batch_size=args.batch_size, rounds=args.rounds, quick=False,
                    turns=args.turns, peer_turns=min(args.peer_turns, args.turns),
                    rollup_events=args.rollup_events, replay_log=args.replay_log,
                    checkpoint_steps=args.checkpoint_steps,
                    bounded_messages=args.bounded_messages,
                    timeline_why=args.timeline_why,
                    timeline_messages=args.timeline_messages,
                    timeline_records=args.timeline_records)


def environment() -> dict[str, str]:
    """What the figures were measured on."""
    def version(dist: str) -> str:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            return "missing"

    return {
        "python": platform.python_version(), "sqlite": sqlite3.sqlite_version,
        "sqlalchemy": version("sqlalchemy"), "eventsourcing": version("eventsourcing"),
        "langgraph": version("langgraph"),
        "langgraph-checkpoint-sqlite": version("langgraph-checkpoint-sqlite"),
        "langchain-core": version("langchain-core"),
        "ctxledger": version("ctxledger"), "machine": platform.machine(),
        "cpus": str(len(__import__("os").sched_getaffinity(0))),
    }


def render(rows: list[Comparison], console: Console) -> None:
    """The result table: leg, ctxledger, peer, ratio, target, PASS/MISS; notes below it."""
    table = Table(title="ctxledger benchmark (medians)")
    table.add_column("leg", no_wrap=True)
    table.add_column("ctxledger", justify="right", no_wrap=True)
    table.add_column("peer", justify="right", no_wrap=True)
    table.add_column("ratio", justify="right", no_wrap=True)
    table.add_column("target", no_wrap=True)
    table.add_column("result", justify="center", no_wrap=True)
    notes: list[str] = []
    for row in rows:
        peer = "-" if row.peer is None else f"{row.peer.format()} ({row.peer_name})"
        ratio = "-" if row.ratio is None else f"{row.ratio:.2f}x"
        verdict = "[green]PASS[/green]" if row.passed else "[red]MISS[/red]"
        table.add_row(row.label, row.ours.format(), peer, ratio, row.target.describe(), verdict)
        if row.note and f"{row.leg}: {row.note}" not in notes:
            notes.append(f"{row.leg}: {row.note}")
    console.print(table)
    for note in notes:
        console.print(f"  {note}")


def main(argv: list[str] | None = None) -> int:
    """Run every registered leg and print (and optionally save) the results."""
    args = parse_args(argv)
    settings = settings_from(args)
    # Wide enough for the table even when the output is not a terminal (make, CI, logs).
    console = Console(width=max(Console().width, 150))
    for module in LEG_MODULES:
        importlib.import_module(module)
    chosen = [leg for leg in LEGS if args.only is None or leg.name in args.only]
    unknown = set(args.only or ()) - {leg.name for leg in LEGS}
    if unknown:
        console.print(f"unknown leg(s): {', '.join(sorted(unknown))}; "
                      f"known: {', '.join(leg.name for leg in LEGS)}")
        return 2
    mix = generate_mix(settings.events, seed=args.seed)
    counts = describe_mix(mix)
    console.print(f"mix: {settings.events:,} events (seed {args.seed}): "
                  + ", ".join(f"{k} {v:,}" for k, v in counts.items()))
    console.print(f"single-append legs: first {settings.single_events:,} events; "
                  f"batches of {settings.batch_size:,}; {settings.rounds} round(s) per leg")
    rows: list[Comparison] = []
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="ctxledger-bench-") as scratch:
        context = Context(settings, mix, Path(scratch))
        for leg in chosen:
            console.print(f"[bold]{leg.name}[/bold]: {leg.title} ...")
            leg_start = time.perf_counter()
            rows.extend(leg.run(context))
            console.print(f"  done in {time.perf_counter() - leg_start:.1f} s")
    render(rows, console)
    console.print(f"total {time.perf_counter() - started:.1f} s")
    if args.json is not None:
        report: dict[str, Any] = {
            "settings": settings.__dict__, "seed": args.seed, "mix": counts,
            "environment": environment(), "results": [r.as_json() for r in rows],
        }
        args.json.write_text(json.dumps(report, indent=2) + "\n")
        console.print(f"saved {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
