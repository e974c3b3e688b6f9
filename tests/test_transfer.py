"""``ctxledger export`` and ``import``: multi-stream JSONL that moves a log between SQLite
and PostgreSQL with every hash intact; imports are validated first, all or nothing, and
idempotent by event id."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from freezegun import freeze_time
from helpers.assertions import one_error_line
from typer.testing import CliRunner, Result

from ctxledger import Ledger
from ctxledger._config import ENV_VAR
from ctxledger.cli import app
from ctxledger.cli._errors import DEBUG_ENV_VAR
from ctxledger.io._examples import EXAMPLES_DIR, ScriptedClock, load_examples, read_examples

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner(env={ENV_VAR: None, DEBUG_ENV_VAR: None, "COLUMNS": "160"})


def _fill(url: str) -> None:
    """The example sessions, each event at its own time, interleaving many streams."""
    examples = read_examples(sorted(EXAMPLES_DIR.glob("*.jsonl")))
    clock = ScriptedClock(examples[0].at)
    with Ledger.open(url, clock=clock) as ledger:
        load_examples(ledger, clock, examples)
        ledger.append("chat-x", [
            {"type": "session.started", "data": {"scope": "x"}},
            {"type": "message.appended", "data": {"role": "user", "content": "hi"},
             "metadata": {"actor": "bob", "extra": {"k": [1, 2]}}},
        ])


def _events(url: str) -> list[tuple[Any, ...]]:
    with Ledger.open(url) as ledger:
        return [(e.stream_id, e.stream_version, e.event_id, e.type, e.data, e.metadata,
                 e.recorded_at, e.prev_hash, e.hash) for e in ledger.events()]


def _ok(result: Result) -> Result:
    assert result.exit_code == 0, (result.stdout, result.stderr)
    return result


def _url(kind: str, tmp_path: Path, request: pytest.FixtureRequest, name: str) -> str:
    if kind == "sqlite":
        return f"sqlite:///{tmp_path / name}"
    return str(request.getfixturevalue("pg_url"))


@pytest.mark.parametrize(("source", "target"), [
    ("sqlite", "sqlite"),
    pytest.param("sqlite", "postgres", marks=pytest.mark.postgres),
    pytest.param("postgres", "sqlite", marks=pytest.mark.postgres),
])
def test_export_import_round_trips_with_identical_hashes(
        runner: CliRunner, tmp_path: Path, request: pytest.FixtureRequest,
        source: str, target: str) -> None:
    src = _url(source, tmp_path, request, "src.db")
    dst = _url(target, tmp_path, request, "dst.db")
    _fill(src)
    exported = _ok(runner.invoke(app, ["export", "--db", src])).stdout
    lines = [json.loads(x) for x in exported.splitlines()]
    assert {tuple(sorted(x)) for x in lines} == {
        ("at", "data", "id", "metadata", "stream", "type")}

    imported = _ok(runner.invoke(app, ["import", "-", "--trust-timestamps", "--db", dst],
                                 input=exported))
    report = json.loads(imported.stdout)
    assert report["events"] == report["written"] == len(lines) == report["head"]
    assert report["already_stored"] == 0
    assert _events(dst) == _events(src)  # ids, times, versions, and so every hash
    verified = _ok(runner.invoke(app, ["verify", "--db", dst]))
    assert json.loads(verified.stdout)["ok"] is True
    # The same state, assembled the same: the projections followed the import.
    again = _ok(runner.invoke(app, ["export", "--db", dst])).stdout
    assert again == exported

    # A second import writes nothing.
    second = json.loads(_ok(runner.invoke(
        app, ["import", "-", "--trust-timestamps", "--db", dst], input=exported)).stdout)
    assert second["written"] == 0 and second["already_stored"] == len(lines)
    assert _events(dst) == _events(src)


def test_export_one_stream_until_a_position_or_time(runner: CliRunner, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'x.db'}"
    _fill(url)
    everything = [json.loads(x) for x in _ok(runner.invoke(
        app, ["export", "--db", url])).stdout.splitlines()]
    with Ledger.open(url) as ledger:
        stream = ledger.events()[0].stream_id
        mine = ledger.events(stream)
    one = [json.loads(x) for x in _ok(runner.invoke(
        app, ["export", stream, "--db", url])).stdout.splitlines()]
    assert [x["id"] for x in one] == [e.event_id for e in mine]
    upto = [json.loads(x) for x in _ok(runner.invoke(
        app, ["export", "--until", "10", "--db", url])).stdout.splitlines()]
    assert upto == everything[:10]
    at = everything[9]["at"]
    by_time = [json.loads(x) for x in _ok(runner.invoke(
        app, ["export", "--until", at, "--db", url])).stdout.splitlines()]
    assert by_time == [x for x in everything if x["at"] <= at][:len(by_time)]
    assert by_time[-1]["at"] <= at and len(by_time) >= 10
    one_error_line(runner.invoke(app, ["export", "--until", "yesterday", "--db", url]),
                   "--until 'yesterday' is neither a log position nor an ISO-8601 time")


def test_import_the_example_files(runner: CliRunner, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'x.db'}"
    total = 0
    for path in sorted(EXAMPLES_DIR.glob("*.jsonl")):
        report = json.loads(_ok(runner.invoke(
            app, ["import", str(path), "--trust-timestamps", "--db", url])).stdout)
        total += report["written"]
        assert report["written"] == report["events"] > 0
    with Ledger.open(url) as ledger:
        assert ledger.head() == total
        assert ledger.verify().ok
    # Idempotent by id: lines without one get uuid5(file name, line), like the demo's.
    path = EXAMPLES_DIR / "card.jsonl"
    again = json.loads(_ok(runner.invoke(app, ["import", str(path), "--db", url])).stdout)
    assert again["written"] == 0


def test_without_trust_events_get_the_clock_time(runner: CliRunner, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'x.db'}"
    body = "".join(json.dumps(x) + "\n" for x in [
        {"stream": "a", "type": "session.started", "data": {}, "at": "2020-01-01T00:00:00Z"},
        {"stream": "b", "type": "session.started", "data": {}},
    ])
    with freeze_time("2026-05-05T05:05:05Z"):
        _ok(runner.invoke(app, ["import", "-", "--db", url], input=body))
    with Ledger.open(url) as ledger:
        stamps = {e.recorded_at.isoformat() for e in ledger.events()}
    assert stamps == {"2026-05-05T05:05:05+00:00"}
    missing = runner.invoke(app, ["import", "-", "--trust-timestamps", "--db", url],
                            input=body)
    assert missing.exit_code == 1
    assert missing.stderr == "error: line 2: 'at' is required with --trust-timestamps\n"


@pytest.mark.parametrize(("body", "message"), [
    ('{"stream": "a", "type": "session.started", "data": {}}\nnot json\n',
     "error: line 2: invalid JSON: Expecting value (column 1)"),
    ('{"stream": "a", "type": "nope", "data": {}}\n', "error: line 1: "),
    ('\n{"type": "session.started", "data": {}}\n',
     "error: line 2: 'stream' must be a non-empty string"),
    ('{"stream": "a", "type": "session.started", "data": {}, "colour": 1}\n',
     "error: line 1: unknown key(s): colour"),
    ('{"stream": "a", "type": "session.started", "data": {}, "at": "monday"}\n',
     "error: line 1: 'at' is not ISO-8601"),
])
def test_bad_lines_are_named_and_nothing_is_written(runner: CliRunner, db_url: str,
                                                    body: str, message: str) -> None:
    _ok(runner.invoke(app, ["init", "--db", db_url]))
    result = runner.invoke(app, ["import", "-", "--db", db_url], input=body)
    assert result.exit_code == 1
    assert result.stderr.startswith(message) and len(result.stderr.splitlines()) == 1
    assert "Traceback" not in result.stderr
    assert _events(db_url) == []


def test_a_rule_broken_late_rolls_back_the_whole_import(runner: CliRunner,
                                                        db_url: str) -> None:
    body = "".join(json.dumps(x) + "\n" for x in [
        {"stream": "a", "type": "session.started", "data": {}},
        {"stream": "b", "type": "session.started", "data": {}},
        {"stream": "a", "type": "message.appended", "data": {"role": "user", "content": "x"}},
        {"stream": "a", "type": "message.retracted", "data": {"message_id": "m9"}},
    ])
    result = runner.invoke(app, ["import", "-", "--db", db_url], input=body)
    assert result.exit_code == 1
    assert result.stderr.startswith("error: line 4: ")
    assert "m9" in result.stderr and len(result.stderr.splitlines()) == 1
    assert _events(db_url) == []


def test_a_trusted_time_out_of_range_creates_no_database(runner: CliRunner,
                                                         tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'x.db'}"
    body = json.dumps({"stream": "s", "type": "session.started", "data": {},
                       "at": "1800-01-01T00:00:00Z"}) + "\n"
    result = runner.invoke(app, ["import", "-", "--trust-timestamps", "--db", url], input=body)
    assert result.exit_code == 1
    assert result.stderr == ("error: line 1: 'at' 1800-01-01T00:00:00+00:00 is outside"
                             " 1900-01-01 .. 9999-01-01 (the session.started event of"
                             " stream 's')\n")
    assert not (tmp_path / "x.db").exists()


def test_an_empty_input_writes_nothing(runner: CliRunner, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'x.db'}"
    result = runner.invoke(app, ["import", "-", "--db", url], input="\n  \n")
    assert result.exit_code == 1
    assert result.stderr == "error: no events in the input (every line is blank)\n"
    assert not (tmp_path / "x.db").exists()
