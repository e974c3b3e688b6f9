"""The ``ctxledger`` command line: output formats, exit codes, and bad input writing nothing.

Runs the real Typer app in-process (``CliRunner``) against real databases; one test runs
the installed console script as a subprocess to check the entry point end to end.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from helpers.assertions import one_error_line
from typer.testing import CliRunner, Result

from ctxledger import Ledger
from ctxledger import _migrate as migrate
from ctxledger._config import ENV_VAR
from ctxledger.cli import app
from ctxledger.cli._errors import DEBUG_ENV_VAR

Run = Callable[..., Result]


def _jsonl(*events: dict[str, Any]) -> str:
    return "".join(json.dumps(e) + "\n" for e in events)


def _started(scope: str = "alice") -> dict[str, Any]:
    return {"type": "session.started", "data": {"scope": scope}}


def _message(content: str, role: str = "user", **extra: Any) -> dict[str, Any]:
    return {"type": "message.appended", "data": {"role": role, "content": content, **extra}}


def _head(url: str) -> int:
    with Ledger.open(url) as ledger:
        return ledger.head()


@pytest.fixture
def runner() -> CliRunner:
    """A runner whose environment never points at a real ledger by accident."""
    return CliRunner(env={ENV_VAR: None, DEBUG_ENV_VAR: None, "COLUMNS": "160"})


@pytest.fixture
def cli(runner: CliRunner, sqlite_url: str) -> Run:
    """Invoke ``ctxledger --db <sqlite file> ARGS...``."""
    def run(*args: str, input: str | bytes | None = None, url: str = sqlite_url,
            **kwargs: Any) -> Result:
        return runner.invoke(app, ["--db", url, *args], input=input, **kwargs)
    return run


# -- init -------------------------------------------------------------------------------------


def test_init_creates_then_reports_up_to_date(cli: Run) -> None:
    first = cli("init")
    assert first.exit_code == 0, first.stderr
    created = json.loads(first.stdout)
    assert created["revision"] == migrate.head_revision()
    assert created["previous_revision"] is None
    assert created["head"] == 0
    assert {p["name"] for p in created["projections"]} >= {"session_stats"}

    again = cli("init")
    assert json.loads(again.stdout)["previous_revision"] == created["revision"]

    text = cli("init", "--format", "text")
    assert text.exit_code == 0
    assert f"{created['revision']} (up to date)" in text.stdout
    assert "session_stats" in text.stdout


def test_init_masks_the_password_in_the_url(runner: CliRunner, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'x.db'}"
    result = runner.invoke(app, ["--db", url, "init"])
    assert json.loads(result.stdout)["url"] == url

    bad = runner.invoke(app, ["--db", "postgresql+psycopg://bob:hunter2@127.0.0.1:1/x",
                              "init"])
    line = one_error_line(bad, "bob:***@127.0.0.1:1")
    assert "hunter2" not in line


# -- append and events (both backends) --------------------------------------------------------


def test_append_and_events_round_trip(runner: CliRunner, db_url: str) -> None:
    def run(*args: str, input: str | None = None) -> Result:
        return runner.invoke(app, ["--db", db_url, *args], input=input)

    batch = _jsonl(_started()) + "\n   \n" + _jsonl(_message("hi", message_id="m1"),
                                                  _message("hello", role="assistant"))
    appended = run("append", "chat-1", "--expected-version", "0", input=batch)
    assert appended.exit_code == 0, appended.stderr
    assert json.loads(appended.stdout) == {"positions": [1, 2, 3], "stream_version": 3}
    other = run("append", "chat-2", input=_jsonl(_started("bob")))
    assert json.loads(other.stdout)["positions"] == [4]

    listed = run("events")
    records = [json.loads(line) for line in listed.stdout.splitlines()]
    assert [r["position"] for r in records] == [1, 2, 3, 4]
    assert [r["type"] for r in records] == ["session.started", "message.appended",
                                            "message.appended", "session.started"]
    assert records[1]["data"] == {"role": "user", "content": "hi", "message_id": "m1"}
    assert records[0]["recorded_at"].endswith("Z")
    with Ledger.open(db_url) as ledger:
        stored = ledger.events()
    assert [r["hash"] for r in records] == [e.hash for e in stored]
    assert [r["event_id"] for r in records] == [e.event_id for e in stored]

    one_stream = run("events", "chat-1", "--after", "1")
    assert [json.loads(x)["position"] for x in one_stream.stdout.splitlines()] == [2, 3]
    limited = run("events", "--after", "1", "--limit", "2")
    assert [json.loads(x)["position"] for x in limited.stdout.splitlines()] == [2, 3]

    text = run("events", "--format", "text")
    assert text.exit_code == 0
    assert "chat-2" in text.stdout and "message.appended" in text.stdout
    assert "[m1] user: hi" in text.stdout


def test_events_pages_through_a_log_longer_than_one_page(
        cli: Run, sqlite_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("ctxledger.io._transfer.EXPORT_PAGE", 3)
    cli("append", "chat-1", input=_jsonl(_started(), *(_message(f"m{i}") for i in range(7))))
    everything = cli("events")
    assert [json.loads(x)["position"] for x in everything.stdout.splitlines()] == \
        list(range(1, 9))
    limited = cli("events", "--after", "2", "--limit", "4")
    assert [json.loads(x)["position"] for x in limited.stdout.splitlines()] == [3, 4, 5, 6]


def test_append_reads_a_file_or_stdin(cli: Run, tmp_path: Path) -> None:
    source = tmp_path / "events.jsonl"
    source.write_text(_jsonl(_started(), _message("from a file")), encoding="utf-8")
    from_file = cli("append", "chat-1", "--file", str(source))
    assert json.loads(from_file.stdout)["positions"] == [1, 2]
    from_stdin = cli("append", "chat-1", "-f", "-", input=_jsonl(_message("from stdin")))
    assert json.loads(from_stdin.stdout) == {"positions": [3], "stream_version": 3}


def test_append_retry_with_the_same_ids_writes_nothing(cli: Run, sqlite_url: str) -> None:
    ids = [str(uuid.uuid4()), str(uuid.uuid4())]
    batch = _jsonl({**_started(), "id": ids[0]}, {**_message("once"), "id": ids[1]})
    first = json.loads(cli("append", "chat-1", input=batch).stdout)
    retry = cli("append", "chat-1", input=batch)
    assert retry.exit_code == 0
    assert json.loads(retry.stdout) == {**first, "duplicate": True}
    assert _head(sqlite_url) == 2


def test_reusing_an_id_for_different_content_is_one_line(cli: Run, sqlite_url: str) -> None:
    event_id = str(uuid.uuid4())
    cli("append", "chat-1", input=_jsonl({**_started(), "id": event_id}))
    result = cli("append", "chat-1", input=_jsonl({**_message("other"), "id": event_id}))
    one_error_line(result, event_id, "different content")
    assert _head(sqlite_url) == 1


def test_env_var_names_the_database(runner: CliRunner, sqlite_url: str) -> None:
    runner.invoke(app, ["append", "chat-1"], input=_jsonl(_started()),
                  env={ENV_VAR: sqlite_url})
    assert _head(sqlite_url) == 1
    listed = runner.invoke(app, ["events"], env={ENV_VAR: sqlite_url})
    assert json.loads(listed.stdout)["stream_id"] == "chat-1"


# -- bad input: one line, exit 1, nothing written ---------------------------------------------

_VALID = _jsonl(_message("one"), _message("two"), _message("three"))


def _bad_inputs() -> list[Any]:
    # Lines 1-3 valid, 4 blank, 5-6 valid, 7 cut short: blank lines still count.
    broken_line_7 = (_VALID + "\n" + _jsonl(_message("five"), _message("six"))
                     + '{"type": "message.appended",\n')
    return [
        pytest.param(broken_line_7.encode(), ("line 7: invalid JSON",), id="broken-json"),
        pytest.param((_VALID + _jsonl({"type": "message.sent", "data": {}})).encode(),
                     ("line 4: unknown event type 'message.sent'",), id="unknown-type"),
        pytest.param((_VALID + _jsonl({"type": "message.appended", "data": {"role": "user"}})
                      ).encode(), ("line 4: message.appended: data: a user message needs content",),
                     id="missing-field"),
        pytest.param((_VALID + _jsonl(_message("x" * (1024 * 1024)))).encode(),
                     ("line 4: message.appended: event is", "over the 1048576-byte limit"),
                     id="oversize"),
        pytest.param((_VALID + "[1, 2]\n").encode(), ("line 4: expected a JSON object",),
                     id="not-an-object"),
        pytest.param(_VALID.encode() + b'{"type": "\xff"}\n', ("line 4: not valid UTF-8",),
                     id="bad-utf8"),
        pytest.param((_VALID + _jsonl({"type": "tool.registered",
                                       "data": {"name": "x", "tool_type": "builtin"}})
                      ).encode(), ("line 4: tool.registered belongs in a scope stream",),
                     id="wrong-stream-kind"),
        pytest.param((_jsonl({**_message("a"), "id": "6f1c1a52-59d6-4a3e-8d3b-3f1f0ba4f3a1"},
                             {**_message("b"), "id": "6f1c1a52-59d6-4a3e-8d3b-3f1f0ba4f3a1"})
                      ).encode(), ("line 2: event id", "already used on line 1"),
                     id="duplicate-id"),
        pytest.param(b"\n  \n\n", ("no events in the input",), id="only-blank-lines"),
    ]


@pytest.mark.parametrize(("payload", "needles"), _bad_inputs())
def test_bad_input_is_one_line_and_writes_nothing(cli: Run, sqlite_url: str, payload: bytes,
                                                  needles: tuple[str, ...]) -> None:
    cli("append", "chat-1", input=_jsonl(_started()))
    before = _head(sqlite_url)
    result = cli("append", "chat-1", input=payload)
    one_error_line(result, *needles)
    assert _head(sqlite_url) == before


def test_conflict_shows_expected_against_actual(runner: CliRunner, db_url: str) -> None:
    def run(*args: str, input: str) -> Result:
        return runner.invoke(app, ["--db", db_url, *args], input=input)

    run("append", "chat-1", input=_jsonl(_started(), _message("hi")))
    before = _head(db_url)
    result = run("append", "chat-1", "--expected-version", "1", input=_jsonl(_message("late")))
    one_error_line(result, "stream 'chat-1'", "expected version 1",
                   "actual version 2")
    assert _head(db_url) == before


def test_missing_input_file_is_a_domain_error(cli: Run, tmp_path: Path) -> None:
    result = cli("append", "chat-1", "--file", str(tmp_path / "absent.jsonl"))
    one_error_line(result, "cannot read", "absent.jsonl")


@pytest.mark.parametrize("args", [
    pytest.param(["append"], id="missing-stream"),
    pytest.param(["append", "chat-1", "--expected-version", "-1"], id="negative-version"),
    pytest.param(["append", "chat-1", "--expected-version", "abc"], id="non-int-version"),
    pytest.param(["append", ""], id="empty-stream"),
    pytest.param(["events", "--format", "xml"], id="unknown-format"),
    pytest.param(["events", "--after", "-3"], id="negative-after"),
    pytest.param(["frobnicate"], id="unknown-command"),
])
def test_usage_errors_exit_2_and_write_nothing(cli: Run, sqlite_url: str,
                                               args: list[str]) -> None:
    cli("append", "chat-1", input=_jsonl(_started()))
    result = cli(*args, input=_jsonl(_message("never written")))
    assert result.exit_code == 2, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    assert _head(sqlite_url) == 1


@pytest.mark.parametrize(("url", "needle"), [
    pytest.param("not a url", "not a database URL", id="garbage"),
    pytest.param("mysql://u@h/db", "unsupported database 'mysql'", id="unsupported"),
    pytest.param("postgresql+psycopg://u@127.0.0.1:1/db", "database postgresql+psycopg://u@",
                 id="unreachable"),
    pytest.param("postgresql+nosuchdriver://u@h/db", "database postgresql+nosuchdriver",
                 id="unknown-driver"),
])
def test_unusable_database_is_one_line(runner: CliRunner, url: str, needle: str) -> None:
    one_error_line(runner.invoke(app, ["--db", url, "events"]), needle)


def test_sqlite_file_in_a_missing_folder(runner: CliRunner, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'absent' / 'x.db'}"
    one_error_line(runner.invoke(app, ["--db", url, "init"]),
                   f"database {url}: unable to open database file")


def test_unexpected_errors_are_one_line_unless_debugging(
        cli: Run, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(self: Ledger) -> int:
        raise RuntimeError("boom\nsecond line")

    monkeypatch.setattr(Ledger, "head", broken)
    one_error_line(cli("init"), "internal error: RuntimeError: boom second line",
                   DEBUG_ENV_VAR, internal=True)
    debugging = cli("init", env={DEBUG_ENV_VAR: "1"})
    assert isinstance(debugging.exception, RuntimeError)


# -- state --------------------------------------------------------------------------------------


def test_state_matches_the_library_at_the_given_time(cli: Run, sqlite_url: str) -> None:
    cli("append", "scope:alice", input=_jsonl(
        {"type": "setting.changed", "data": {"key": "compression_level", "value": "chat_only"}}))
    cli("append", "chat-1", input=_jsonl(
        _started(), _message("hi", message_id="m1"), _message("yo", role="assistant"),
        {"type": "message.retracted", "data": {"message_id": "m1"}},
        {"type": "tool.used", "data": {"tool_name": "Read"}}))
    now = datetime(2031, 1, 1, tzinfo=UTC)
    result = cli("state", "chat-1", "--now", "2031-01-01T00:00:00Z")
    assert result.exit_code == 0, result.stderr
    with Ledger.open(sqlite_url, clock=lambda: now) as ledger:
        expected = ledger.state("chat-1")
    assert json.loads(result.stdout) == expected

    text = cli("state", "chat-1", "--format", "text")
    assert text.exit_code == 0
    assert "state chat-1" in text.stdout
    assert "chat_only" in text.stdout


def test_state_of_an_unknown_session_is_one_line(cli: Run) -> None:
    cli("init")
    one_error_line(cli("state", "nobody"), "nobody")


# -- verify -------------------------------------------------------------------------------------


def test_verify_passes_on_an_intact_log(cli: Run) -> None:
    cli("append", "chat-1", input=_jsonl(_started(), _message("hi")))
    result = cli("verify")
    assert result.exit_code == 0
    assert json.loads(result.stdout) == {"ok": True, "events": 2, "streams": 1,
                                         "triggers_ok": True, "seals": 0,
                                         "sealed_position": 0, "problems": []}
    text = cli("verify", "--format", "text")
    assert text.exit_code == 0 and "hash chains" in text.stdout


def test_verify_lists_every_problem_and_exits_1(cli: Run, sqlite_url: str) -> None:
    cli("append", "chat-1", input=_jsonl(_started(), _message("hi"), _message("there")))
    engine = sa.create_engine(sqlite_url)
    with engine.begin() as conn:  # tamper the way an attacker with file access could
        conn.exec_driver_sql("DROP TRIGGER events_no_update")
        conn.exec_driver_sql(
            """UPDATE events SET data = '{"content":"forged","role":"user"}'"""
            " WHERE position = 2")
    engine.dispose()

    result = cli("verify")
    report = json.loads(result.stdout)
    assert report["ok"] is False and report["triggers_ok"] is False
    assert any("hash mismatch" in p and "position 2" in p for p in report["problems"])
    assert any("events_no_update" in p for p in report["problems"])
    one_error_line(result, f"verify found {len(report['problems'])} problem(s)")

    text = cli("verify", "--format", "text")
    assert text.exit_code == 1
    for problem in report["problems"]:
        assert problem in " ".join(text.stdout.split())


# -- rebuild ------------------------------------------------------------------------------------


def test_rebuild_all_or_one_projection_keeps_the_state(cli: Run, sqlite_url: str) -> None:
    cli("append", "chat-1", input=_jsonl(_started(), _message("hi"), _message("yo")))
    before = cli("state", "chat-1", "--now", "2030-01-01T00:00:00Z").stdout
    with Ledger.open(sqlite_url) as ledger:
        names = [s.name for s in ledger.projection_status()]

    everything = cli("rebuild")
    assert everything.exit_code == 0, everything.stderr
    report = json.loads(everything.stdout)
    assert report["rebuilt"] == names and report["head"] == 3
    assert "rebuilding all" in everything.stderr  # the progress bar went to stderr

    one = cli("rebuild", "--projection", "session_stats", "--format", "text")
    assert one.exit_code == 0
    assert "session_stats" in one.stdout
    assert cli("state", "chat-1", "--now", "2030-01-01T00:00:00Z").stdout == before


def test_rebuild_unknown_projection_lists_the_known_ones(cli: Run, sqlite_url: str) -> None:
    with Ledger.open(sqlite_url) as ledger:
        names = [s.name for s in ledger.projection_status()]
    line = one_error_line(cli("rebuild", "--projection", "nope"),
                          "unknown projection 'nope'")
    assert line.endswith(", ".join(names))


# -- presentation -------------------------------------------------------------------------------


def test_text_output_never_reads_user_content_as_markup(cli: Run) -> None:
    cli("append", "chat-1", input=_jsonl(_started(), _message("[bold]not bold[/bold] [red]")))
    result = cli("events", "chat-1", "--format", "text")
    assert "[bold]not bold[/bold] [red]" in result.stdout


def test_version(runner: CliRunner) -> None:
    from ctxledger import __version__

    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0 and result.stdout.strip() == f"ctxledger {__version__}"


@pytest.mark.slow
def test_the_console_script_end_to_end(tmp_path: Path) -> None:
    script = shutil.which("ctxledger", path=str(Path(sys.executable).parent))
    assert script is not None, "the ctxledger console script is not installed"
    env = {**os.environ, ENV_VAR: f"sqlite:///{tmp_path / 'cli.db'}"}
    env.pop(DEBUG_ENV_VAR, None)

    def run(*args: str, input: str = "") -> subprocess.CompletedProcess[str]:
        return subprocess.run([script, *args], input=input, capture_output=True, text=True,
                              env=env, cwd=tmp_path, timeout=120, check=False)

    ok = run("append", "chat-1", input=_jsonl(_started(), _message("hi")))
    assert (ok.returncode, json.loads(ok.stdout)["positions"]) == (0, [1, 2])
    bad = run("append", "chat-1", input=_jsonl(_message("fine")) + "{oops\n")
    assert bad.returncode == 1
    assert bad.stderr.splitlines() == [bad.stderr.strip()]
    assert bad.stderr.startswith("error: line 2: invalid JSON")
    usage = run("append")
    assert usage.returncode == 2 and "Traceback" not in usage.stderr
    assert run("verify").returncode == 0
