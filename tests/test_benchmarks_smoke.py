"""``benchmarks/run.py --quick`` runs end to end and reports every leg.

A smoke run only: no figure is asserted (a test suite does not time things).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RUN = ROOT / "benchmarks" / "run.py"


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
    assert labels == [
        "single appends vs raw sqlite3 (commit per row)",
        "single appends vs eventsourcing (save per event)",
        "1000-event batches vs raw sqlite3 executemany",
        "1000-event batches vs eventsourcing batch save",
        "rebuild of every projection",
    ]
    for row in report["results"]:
        assert row["label"] in done.stdout
        assert row["ours"]["value"] > 0 and row["ours"]["unit"] == "ev/s"
        assert isinstance(row["passed"], bool)
        assert (row["peer"] is None) == (row["ratio"] is None)
    for leg in ("single", "batch", "rebuild"):
        assert f"{leg}: " in done.stdout
    assert report["settings"]["quick"] is True
    assert report["mix"]["message.appended"] > report["mix"]["tool.used"] > 0


def test_unknown_leg_is_a_usage_error(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, str(RUN), "--quick", "--only", "nope"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert "unknown leg(s): nope" in done.stdout
