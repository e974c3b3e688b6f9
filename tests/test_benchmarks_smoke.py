"""``benchmarks/run.py --quick`` runs end to end and reports every leg.

A smoke run only: no figure is asserted (a test suite does not time things).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RUN = ROOT / "benchmarks" / "run.py"


def _langgraph_installed() -> bool:
    try:
        return importlib.util.find_spec("langgraph.checkpoint.sqlite") is not None
    except ModuleNotFoundError:
        return False


@pytest.mark.slow
def test_quick_run_prints_every_leg_and_saves_json(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    done = subprocess.run(
        [sys.executable, str(RUN), "--quick", "--json", str(out)],
        cwd=tmp_path, capture_output=True, text=True, timeout=600,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(out.read_text())
    labels = [row["label"] for row in report["results"]]
    # --quick turn loop: 30 turns each; without langgraph the peer's rows are skipped.
    peer_rows = ["chat turn vs LangGraph at 30 turns",
                 "database size vs LangGraph at 30 turns"] if _langgraph_installed() else []
    if not peer_rows:
        assert "LangGraph peer skipped" in done.stdout
    # The PostgreSQL writers leg (--quick: 1 and 4 writers) runs where the server does.
    pg_rows = [label for n in (1, 4) for label in (
        f"PG {n} writer(s): total", f"PG {n} writer(s): p50 append latency",
        f"PG {n} writer(s): CPU per event (ctxledger)", f"PG {n} writer(s): machine CPU busy",
    )] + ["PG 4 writers vs 1 writer (ctxledger)"]
    serve_pg_rows = ["PostgreSQL, 2 clients: turns/s with 2 workers vs 1",
                     "PostgreSQL, 2 clients: p50 of a turn, 1 worker vs in process"]
    erase_pg_rows = ["another scope's append p99 during an erase (PostgreSQL)",
                     "another scope's worst append during an erase (PostgreSQL)",
                     "... the writer a thread of the erasing process: p99",
                     "... the scrub by VACUUM FULL: worst append"]
    if "pg_writers: " in done.stdout and "skipped: PostgreSQL" in done.stdout:
        pg_rows = []
        erase_pg_rows = []
    # The chat peers leg at --quick sizes (10 and 50 turns), where both peers are installed.
    chat_rows = [f"{family} turn at {size} turns: {ours} vs the peer"
                 for family, ours in (("Agents SDK", "LedgerSession"),
                                      ("LangChain", "LedgerChatMessageHistory"))
                 for size in (10, 50)]
    if "chat_peers skipped" in done.stdout:
        chat_rows = []
    if "PostgreSQL rows skipped" in done.stdout:
        serve_pg_rows = []
    assert labels == [
        "single appends vs raw sqlite3 (commit per row)",
        "single appends vs eventsourcing (save per event)",
        "single appends: ctxledger's SQL alone (replayed) vs eventsourcing",
        "single appends: ctxledger vs its own SQL alone",
        "WAL frames per single append",
        "1000-event batches vs raw sqlite3 executemany",
        "1000-event batches vs eventsourcing batch save",
        "1000-event batches: ctxledger's SQL alone (replayed) vs eventsourcing",
        "1000-event batches: ctxledger vs its own SQL alone",
        "rebuild of every projection",
        # --quick sizes: 300, 600 and 1,000 events.
        "card assembly at 600 vs 300 events",
        "card assembly at 1k vs 300 events",
        "session assembly at 600 vs 300 events",
        "session assembly at 1k vs 300 events",
        "novel assembly at 600 vs 300 events",
        "novel assembly at 1k vs 300 events",
        "card re-assembly at 1k events, nothing new",
        "card re-assembly at 1k events after one new message",
        "card re-assembly after a retraction, 1k vs 300 events",
        "session re-assembly at 1k events, nothing new",
        "session re-assembly at 1k events after one new observation",
        "ctxledger chat turn at 30 vs 10 turns",
        *peer_rows,
        "to_openai() at 30 turns vs the assemble",
        "to_anthropic() at 30 turns vs the assemble",
        # --quick sizes: 300 and 1,000 events.
        "cold assembly (new process) at 1k vs 300 events",
        "rollup of 30 days (catch-up)",
        "second rollup (no-op) vs the first",
        "first seal of 3,000 events",
        "first seal, keyed (HMAC)",
        "seal check (verify)",
        "incremental seal of 10,000 events",
        "brief re-assembly after one new message, 1k vs 300 snippets",
        "brief index builds after new messages at 1k snippets",
        "replay at 5,000 vs 200 events",
        # The novel leg at --quick sizes: 1,000 vs 100 items (5,000 vs 500 in full).
        "novel assembly after one item.put, 1,000 vs 100 items",
        "novel re-assembly of 1,000 items after one item.put",
        "novel assembly after one chapter.moved, 1,000 vs 100 items",
        "novel re-assembly of 1,000 items after one chapter.moved",
        "novel assembly after one chapter.moved, dense chapters, 1,000 vs 100 items",
        # The lorebook leg at --quick sizes: 1,000 vs 100 messages (10,000 in full).
        "card re-assembly with a lorebook after one new message, 1,000 vs 100 messages",
        "lorebook activate() after one new message (500 entries)",
        "ctxledger --version (the wheel, in a fresh venv)",
        "ctxledger --help (the wheel, in a fresh venv)",
        "ctxledger state on a small database (the wheel, in a fresh venv)",
        "ctxledger --version (the editable checkout)",
        "ctxledger --help (the editable checkout)",
        "ctxledger state on a small database (the editable checkout)",
        "floor: python -c 'import sqlalchemy, pydantic'",
        *pg_rows,
        # The service legs at --quick sizes: 2 clients of 12 turns, 30 turns alone.
        "SQLite, 2 clients: p50 of a turn through the service vs in process",
        "SQLite, 2 clients: turns/s, serve vs in-process",
        "SQLite, 2 clients: p99 of a turn, serve vs in-process",
        *serve_pg_rows,
        "one client: turn 30 vs turn 15 through the service",
        "one worker's memory after 100 turns vs after 10",
        "erase 500 events in a 3,500-event log",
        *erase_pg_rows,
        "single appends, file witness after every commit",
        "single appends, file witness every 100 events",
        # The LangGraph checkpointer against SqliteSaver at --quick size: 30 steps.
        "database size after 30 steps of a chat graph",
        "put latency, mean over the 30 steps",
        "put latency, median of the last 100 steps",
        # The browser view's leg at --quick sizes: 200 messages (2,000 in full).
        "session page, 200 messages, all in the context",
        "session page, 200 messages, context limit 8,192",
        "timeline of 202 steps: scratch folds",
        "timeline of 202 steps vs a replay per step",
        "timeline page, 202 steps (the last 100 drawn)",
        # The hook leg: process wall times, and the import floors beside them.
        "PostToolUse, worker (spools; the worker drains), vs python -c pass of the same venv",
        "SessionStart, worker (it drains and assembles)",
        "PostToolUse, no worker (spools; a drainer process appends)",
        "SessionStart, no worker (drains, loads the stack, prints the injection)",
        "floor: python -c pass",
        "floor: python -c 'import sqlalchemy, pydantic'",
        "floor: python -c 'import ctxledger._ledger' (the store, the projections, their"
        " pydantic models)",
        # The bounded leg (--quick: 40 messages): the server's memory, and the times.
        "timeline of 40 messages through the service: peak RSS above idle",
        "why of 40 messages through the service: peak RSS above idle",
        "timeline of 40 messages: service vs in process",
        "why of 40 messages: service vs in process",
        # The timeline leg (--quick: why over 60 messages, a 30-message timeline, 20
        # recorded assemblies).
        "why over 60 messages vs the live turns",
        "why over 60 messages: peak memory vs one replay's",
        "timeline of 30 messages (32 steps), no context limit",
        "audit of 20 recorded assemblies in one session vs its fold alone",
        "... the audit vs the reducers alone (no assembly)",
        "... the audit vs the live turns that recorded them",
        # The tokens leg (--quick: 2,000 texts): o200k against an independent count at
        # every limit, usage.reported's cost, o200k against cl100k.
        "o200k tokens.total != independent count (120 limits)",
        "usage.reported per turn vs the turn",
        "o200k_base counting vs cl100k_base (2,000 texts)",
        *chat_rows,
    ]
    for row in report["results"]:
        assert row["label"] in done.stdout
        unit = row["ours"]["unit"]
        if row["leg"] == "pg_writers":
            assert unit in ("ev/s", "ms", "%")
        elif row["label"].startswith("WAL frames"):
            assert unit == "frames" and row["peer"] is None
        elif row["leg"] in ("single", "batch", "rebuild", "witness") or (
                row["leg"] == "rollup" and row["peer"] is None):
            assert unit == "ev/s"
        elif row["label"].startswith("database size"):
            assert unit == row["peer"]["unit"] == "MB"
        elif row["leg"] in ("serve", "serve_memory"):
            assert unit in ("ms", "turns/s", "MB")
        elif row["leg"] == "seal":
            assert unit in ("ev/s", "s")
        elif row["leg"] == "hook":
            assert unit == "ms"
        elif row["leg"] == "ui":  # pages in ms, the timeline in s, its folds counted
            assert unit in ("ms", "s", "folds")
        elif row["leg"] == "bounded":  # memory above idle, times against in process
            assert unit == ("MB" if row["peer"] is None else "s")
        elif row["leg"] == "timeline":  # times, and why's peak memory against a replay's
            assert unit in ("s", "MB") and (row["peer"] is None
                                            or row["peer"]["unit"] == unit)
        elif row["leg"] == "tokens":  # mismatched limits, a turn's cost, counting times
            assert unit in ("limits", "ms", "s") and (row["peer"] is None
                                                      or row["peer"]["unit"] == unit)
        elif row["leg"] in ("assemble", "replay", "startup", "lorebook", "erase_pg") or (
                row["peer"] is not None):
            assert unit == "ms" and (row["peer"] is None or row["peer"]["unit"] == "ms")
        else:
            assert unit == "calls"
        # A tokenizer call count may be 0; rates and times may not.
        # Memory above idle may be none at all.
        assert row["ours"]["value"] >= 0 if unit in ("MB", "limits") or (
            unit == "calls" and row["peer"] is None) else row["ours"]["value"] > 0, row
        assert isinstance(row["passed"], bool)
        assert (row["peer"] is None) == (row["ratio"] is None)
    for leg in ("single", "batch", "rebuild", "assemble", "reassemble", "turnloop", "cold",
                "rollup", "seal", "brief", "replay",
                "novel", "lorebook", "startup", "pg_writers", "erase", "erase_pg", "serve",
                "serve_memory", "witness", "langgraph", "ui", "hook", "bounded", "timeline",
                "tokens", "chat_peers"):
        assert f"{leg}: " in done.stdout
    assert report["settings"]["quick"] is True
    assert report["mix"]["message.appended"] > report["mix"]["tool.used"] > 0


def test_unknown_leg_is_a_usage_error(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, str(RUN), "--quick", "--only", "nope"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert "unknown leg(s): nope" in done.stdout
