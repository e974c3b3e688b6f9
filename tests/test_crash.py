"""``kill -9`` during appends: nothing acknowledged is lost, nothing is half-written.

A child process (``tests/helpers/writer.py``) appends batches of mixed events to three
streams in an endless loop and reports each batch's ids before the append ("intent") and
its positions after the commit ("ack"), which it also appends to an acknowledgement file
and fsyncs before going on. The test kills it with SIGKILL at a random moment once it has
acknowledged some batches, at whatever point of an append it happens to be, three times
over on the same database; the fsynced file is the record of what was acknowledged.
Then, before anything repairs the database, every projection must be inline (at the
head: inline projections commit with the events), and after
opening it: verify passes, versions are contiguous, every acknowledged batch is stored
where it was acknowledged, the batch in flight is stored whole or not at all, and the
projection tables equal a rebuild.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any

import pytest
import sqlalchemy as sa
from helpers.tables import assert_projections_equal_rebuild

from ctxledger import Ledger
from ctxledger.projections.checkpoints import checkpoints
from ctxledger.store.sql_engine import create_engine

WRITER_SCRIPT = Path(__file__).parent / "helpers" / "writer.py"
STREAMS = ("crash-a", "crash-b", "crash-c")
ROUNDS = 3
# Only a guard against a hung child; never an assertion about speed.
HANG_GUARD_SECONDS = 300

pytestmark = pytest.mark.slow


class KilledWriter:
    """An endless writer that is SIGKILLed after ``acks`` acknowledged batches."""

    def __init__(self, url: str, tag: str, acks: int, ack_file: Path) -> None:
        self.records: list[dict[str, Any]] = []
        self.enough = threading.Event()
        self.target = acks
        self.ack_file = ack_file
        self.proc = subprocess.Popen(
            [sys.executable, str(WRITER_SCRIPT), url, *STREAMS, "--batches", "0",
             "--batch-size", "0", "--mixed", "--tag", tag, "--ack-file", str(ack_file)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        self.reader = threading.Thread(target=self._drain, args=(self.proc.stdout,))
        self.reader.start()

    def _drain(self, stdout: IO[str]) -> None:
        acked = 0
        for line in stdout:
            record = json.loads(line)
            self.records.append(record)
            if "ack" in record:
                acked += 1
                if acked >= self.target:
                    self.enough.set()
        self.enough.set()  # the child ended on its own: let the test see why

    def kill_mid_run(self) -> None:
        """SIGKILL the child while it is appending, then reap it."""
        assert self.enough.wait(HANG_GUARD_SECONDS), "writer produced no acknowledgements"
        time.sleep(random.uniform(0, 0.05))  # a random moment in whatever append is running
        alive = self.proc.poll() is None
        if alive:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=HANG_GUARD_SECONDS)
        self.reader.join()
        assert self.proc.stderr is not None
        stderr = self.proc.stderr.read()
        self.proc.stderr.close()
        assert alive, f"the writer stopped before it was killed: {stderr}"
        assert self.proc.returncode == -signal.SIGKILL

    def acknowledged(self) -> list[dict[str, Any]]:
        """Every batch whose commit the child recorded in its fsynced acknowledgement file
        (what it printed, plus at most one recorded just before the kill)."""
        acks = [json.loads(line) for line in self.ack_file.read_text().splitlines()]
        printed = [r["ack"] for r in self.records if "ack" in r]
        assert acks[:len(printed)] == printed and len(acks) - len(printed) <= 1
        return acks

    def in_flight(self) -> list[str]:
        """Ids of the batch announced but not acknowledged when the child died (or [])."""
        intents = [r["intent"] for r in self.records if "intent" in r]
        if len(intents) > len(self.acknowledged()):
            return list(intents[-1]["ids"])
        return []


def assert_checkpoints_at_head(url: str) -> None:
    """Before any open repairs it: every projection is inline (at the head), no mark past it."""
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            if conn.dialect.name == "sqlite":
                assert conn.exec_driver_sql("PRAGMA integrity_check").scalar_one() == "ok"
            head = conn.exec_driver_sql("SELECT max(position) FROM events").scalar_one()
            marks = conn.execute(sa.select(checkpoints.c.name, checkpoints.c.position,
                                           checkpoints.c.inline)).all()
    finally:
        engine.dispose()
    assert marks, "no projection checkpoints were stored"
    # Inline projections commit with the events (at the head by construction); their
    # stored position is a mark that never passes the head.
    assert all(inline and position <= head for _, position, inline in marks), (marks, head)


def test_kill_9_during_appends(db_url: str, tmp_path: Path) -> None:
    acknowledged: list[dict[str, Any]] = []
    in_flight: list[list[str]] = []
    with Ledger.open(db_url):
        pass  # schema first, so every round's child starts writing at once
    for round_number in range(ROUNDS):
        writer = KilledWriter(db_url, f"round{round_number}", acks=30 + 15 * round_number,
                              ack_file=tmp_path / f"acks-{round_number}.jsonl")
        writer.kill_mid_run()
        acknowledged.extend(writer.acknowledged())
        in_flight.append(writer.in_flight())
        assert_checkpoints_at_head(db_url)

    with Ledger.open(db_url) as ledger:
        report = ledger.verify(anchor=ledger.anchor())
        assert report.ok, report.problems
        stored = {e.event_id: e for e in ledger.log.read_all()}
        for stream in STREAMS:
            versions = [e.stream_version for e in ledger.log.read_stream(stream)]
            assert versions == list(range(1, len(versions) + 1))
        for ack in acknowledged:
            assert [stored[i].position for i in ack["ids"]] == ack["positions"]
            assert {stored[i].stream_id for i in ack["ids"]} == {ack["stream"]}
        for ids in in_flight:
            present = [i in stored for i in ids]
            assert all(present) or not any(present), "a batch was half-written"
        accounted = {i for ack in acknowledged for i in ack["ids"]}
        accounted |= {i for ids in in_flight for i in ids if i in stored}
        assert set(stored) == accounted, "events appeared that no writer wrote"
        assert_projections_equal_rebuild(ledger)
