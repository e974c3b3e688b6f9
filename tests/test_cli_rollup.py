"""``ctxledger rollup`` and ``ctxledger usage``: output, exit codes, bad input writing nothing."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import pytest
from helpers.usage_log import StepClock, write_usage_log
from typer.testing import CliRunner, Result

from ctxledger import Ledger
from ctxledger._config import ENV_VAR
from ctxledger.cli import app
from ctxledger.cli._errors import DEBUG_ENV_VAR
from ctxledger.render._usage import sparkline

NOW = "2026-03-06T03:00:00Z"


@pytest.fixture
def url(db_url: str) -> str:
    """A ledger with five days of usage (2026-03-02 .. 03-06) on each backend."""
    clock = StepClock(datetime(2026, 3, 1, tzinfo=UTC))
    with Ledger.open(db_url, clock=clock) as ledger:
        write_usage_log(ledger, clock, date(2026, 3, 2), days=5)
    return db_url


def run(url: str, *args: str) -> Result:
    runner = CliRunner(env={ENV_VAR: None, DEBUG_ENV_VAR: None, "COLUMNS": "160"})
    return runner.invoke(app, ["--db", url, *args])


def head(url: str) -> int:
    with Ledger.open(url) as ledger:
        return ledger.head()


def assert_usage_error(result: Result, needle: str) -> None:
    assert result.exit_code == 2, (result.stdout, result.stderr)
    assert needle in result.stderr
    assert "Traceback" not in result.stderr + result.stdout


def test_rollup_prints_the_days_and_a_second_run_writes_nothing(url: str) -> None:
    first = run(url, "rollup", "--now", NOW)
    assert first.exit_code == 0, first.stderr
    report: dict[str, Any] = json.loads(first.stdout)
    assert [d["day"] for d in report["rolled"]] == [
        "2026-03-02", "2026-03-03", "2026-03-04", "2026-03-05"]
    assert report["retention_days"] == 30
    after_first = head(url)

    second = run(url, "rollup", "--now", NOW, "--format", "text")
    assert second.exit_code == 0, second.stderr
    assert "rolled up 0 day(s) before 2026-03-06; retention 30 days" in second.stdout
    assert head(url) == after_first


def test_usage_text_has_daily_figures_and_a_sparkline_per_tool(url: str) -> None:
    assert run(url, "rollup", "--now", NOW).exit_code == 0
    result = run(url, "usage", "--scope", "alpha", "--days", "5", "--now", NOW,
                 "--format", "text")
    assert result.exit_code == 0, result.stderr
    out = result.stdout
    assert "usage of alpha, 2026-03-02 .. 2026-03-06" in out
    assert "raw (so far)" in out and "rollup" in out
    read = json.loads(run(url, "usage", "--scope", "alpha", "--days", "5", "--now",
                          NOW).stdout)
    for tool in read["tools"]:
        assert f"{tool['name']} " in out
        assert sparkline(tool["daily"]) in out
    assert [s["name"] for s in read["servers"]] == ["gh"]


def test_sparkline_scales_to_the_largest_day() -> None:
    assert sparkline([0, 1, 2, 4, 8]) == "·▂▃▅█"
    assert sparkline([0, 0]) == "··"
    assert sparkline([3]) == "█"


@pytest.mark.parametrize(("args", "needle"), [
    (("rollup", "--retention-days", "0"), "--retention-days"),
    (("usage", "--scope", "alpha", "--days", "-1"), "--days"),
    (("usage", "--scope", "alpha", "--days", "0"), "--days"),
    (("usage", "--days", "3"), "--scope"),
])
def test_usage_errors_exit_2_and_write_nothing(url: str, args: tuple[str, ...],
                                               needle: str) -> None:
    before = head(url)
    assert_usage_error(run(url, *args), needle)
    assert head(url) == before


def test_an_unknown_scope_is_one_error_line(url: str) -> None:
    result = run(url, "usage", "--scope", "nobody")
    assert result.exit_code == 1
    assert result.stderr.splitlines() == [
        "error: unknown scope 'nobody': no session or scope stream names it"]
    assert result.stdout == ""


@pytest.mark.parametrize(("now", "line"), [
    ("9998-12-31T00:00:00Z", "error: now 9998-12-31T00:00:00Z is later than the ledger's clock"),
    ("2026-03-01T00:00:00Z", "error: now 2026-03-01T00:00:00Z is before the log's first event"
                             " (2026-03-02T01:00:00Z): there is no day to roll up"),
])
def test_a_now_the_rollup_cannot_use_is_one_error_line_and_writes_nothing(
        url: str, now: str, line: str) -> None:
    before = head(url)
    result = run(url, "rollup", "--now", now)
    assert result.exit_code == 1, result.stdout
    assert len(result.stderr.splitlines()) == 1 and result.stderr.startswith(line)
    assert result.stdout == "" and head(url) == before


def test_an_import_into_rolled_days_is_rolled_up_again(url: str, tmp_path: Path) -> None:
    assert run(url, "rollup", "--now", NOW).exit_code == 0
    late = tmp_path / "late.jsonl"
    late.write_text(json.dumps({"stream": "s1", "type": "tool.used",
                                "id": "7f6d1a52-0b8e-4c1e-9a57-3f4f2f0b1c11",
                                "data": {"tool_name": "Grep"},
                                "at": "2026-03-03T12:00:00Z"}) + "\n")
    imported = run(url, "import", str(late), "--trust-timestamps")
    assert imported.exit_code == 0, imported.stderr
    usage = json.loads(run(url, "usage", "--scope", "alpha", "--days", "5", "--now",
                           NOW).stdout)
    assert [t["daily"] for t in usage["tools"] if t["name"] == "Grep"] == [[0, 1, 0, 0, 0]]
    again = run(url, "rollup", "--now", NOW, "--format", "text")
    assert again.exit_code == 0, again.stderr
    assert "1 day(s) rolled up again for later events" in again.stdout
    assert "2026-03-03 (again)" in again.stdout
    after = json.loads(run(url, "usage", "--scope", "alpha", "--days", "5", "--now",
                           NOW).stdout)
    assert after["tools"] == usage["tools"]
    assert [d["source"] for d in after["days"]] == ["rollup"] * 4 + ["raw"]
