"""The reliability suite: real processes against one database, on SQLite and PostgreSQL.

- four processes append 500 events each, in batches alternating between their own stream
  and one stream they all share;
- processes race on ``expected_version``: every version has exactly one winner;
- ``rebuild`` and ``verify`` run while two processes append.

(``kill -9`` during appends is ``test_crash.py``.) Afterwards: every acknowledged batch is
stored whole where it was acknowledged, versions are contiguous, ``verify`` passes with a
fresh seal and anchor, and the projections equal a rebuild.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import pytest
import sqlalchemy as sa
from helpers.processes import Child
from helpers.tables import assert_projections_equal_rebuild

from ctxledger import Ledger

pytestmark = pytest.mark.slow

WRITERS = 4
EVENTS_EACH = 500
BATCH = 5
SHARED = "shared"


@contextmanager
def children(url: str, argsets: Sequence[Sequence[str]]) -> Iterator[list[Child]]:
    """Start one writer per argument set; kill any still running on the way out."""
    started = [Child(url, *args) for args in argsets]
    try:
        yield started
    finally:
        for child in started:
            child.kill()


def acks(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r["ack"] for r in records if "ack" in r]


def check_log(ledger: Ledger, acknowledged: list[dict[str, Any]]) -> None:
    """Every acknowledged batch stored whole where acknowledged; nothing else; all intact."""
    stored = {e.event_id: e for e in ledger.log.read_all()}
    for ack in acknowledged:
        assert [stored[i].position for i in ack["ids"]] == ack["positions"]
        assert {stored[i].stream_id for i in ack["ids"]} == {ack["stream"]}
        # One batch is one transaction: no other writer's event inside its range.
        assert ack["positions"] == list(range(ack["positions"][0],
                                              ack["positions"][0] + len(ack["ids"])))
    assert set(stored) == {i for ack in acknowledged for i in ack["ids"]}
    for stream in {e.stream_id for e in stored.values()}:
        versions = [e.stream_version for e in ledger.log.read_stream(stream)]
        assert versions == list(range(1, len(versions) + 1)), stream
    report = ledger.verify(anchor=ledger.anchor())
    assert report.ok, report.problems
    assert report.sealed_position == ledger.head()
    assert_projections_equal_rebuild(ledger)


def test_four_processes_on_own_and_shared_streams(db_url: str) -> None:
    with Ledger.open(db_url) as ledger:  # the schema first, so every child starts at once
        argsets = [(f"own-{n}", SHARED, "--batches", str(EVENTS_EACH // BATCH),
                    "--batch-size", str(BATCH), "--tag", f"w{n}", "--wait-for-go")
                   for n in range(WRITERS)]
        with children(db_url, argsets) as started:
            for child in started:
                child.go()
            acknowledged = [ack for child in started for ack in acks(child.finish())]
        assert len(acknowledged) == WRITERS * EVENTS_EACH // BATCH
        assert ledger.head() == WRITERS * EVENTS_EACH
        per_stream = Counter(e.stream_id for e in ledger.log.read_all())
        assert per_stream == {SHARED: WRITERS * EVENTS_EACH // 2,
                              **{f"own-{n}": EVENTS_EACH // 2 for n in range(WRITERS)}}
        check_log(ledger, acknowledged)
        with ledger.engine.connect() as conn:
            totals = dict(conn.execute(sa.text(
                "SELECT stream_id, messages_total FROM sessions")).all())
        assert totals == per_stream


def test_processes_racing_on_expected_version(db_url: str) -> None:
    racers, attempts = 3, 25
    with Ledger.open(db_url) as ledger:
        argsets = [("race", "--batches", "0", "--race", str(attempts), "--tag", f"r{n}",
                    "--wait-for-go") for n in range(racers)]
        with children(db_url, argsets) as started:
            for child in started:
                child.go()
            outcomes = [r["race"] for child in started for r in child.finish() if "race" in r]
        assert len(outcomes) == racers * attempts
        winners = Counter(o["version"] for o in outcomes if o["won"])
        stored = ledger.log.read_stream("race")
        # Every version was won exactly once, by the event that is stored at it.
        assert winners == Counter(range(1, len(stored) + 1))
        won = {o["version"]: o["id"] for o in outcomes if o["won"]}
        assert {e.stream_version: e.event_id for e in stored} == won
        assert len(stored) >= attempts  # each round someone wins
        losses = [o for o in outcomes if not o["won"]]
        assert all(o["version"] <= len(stored) for o in losses)
        check_log(ledger, [{"stream": "race", "ids": [e.event_id],
                            "positions": [e.position]} for e in stored])


def test_rebuild_and_verify_while_two_processes_append(db_url: str) -> None:
    with Ledger.open(db_url) as ledger:
        argsets = [(f"busy-{n}", "--batches", "80", "--batch-size", str(BATCH),
                    "--tag", f"b{n}", "--mixed", "--wait-for-go") for n in range(2)]
        rounds = 0
        with children(db_url, argsets) as started:
            for child in started:
                child.go()
            while rounds < 2 or any(c.proc.poll() is None for c in started):
                assert ledger.rebuild() == [p.name for p in ledger.runner.projections]
                report = ledger.verify()
                assert report.ok, report.problems
                ledger.seal()
                rounds += 1
                if all(c.proc.poll() is not None for c in started):
                    break
            acknowledged = [ack for child in started for ack in acks(child.finish())]
        assert rounds >= 2
        assert ledger.head() == 2 * 80 * BATCH
        check_log(ledger, acknowledged)
