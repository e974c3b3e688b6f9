"""Where ``--db`` goes, what a read does to a database that does not exist, and the URLs
refused up front (``--db ''``, read-only SQLite, PostgreSQL without its extra)."""

from __future__ import annotations

import gc
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from helpers.assertions import one_error_line
from typer.testing import CliRunner

from ctxledger import InvalidArgument, Ledger
from ctxledger._config import ENV_VAR
from ctxledger.cli import app
from ctxledger.cli._errors import DEBUG_ENV_VAR
from ctxledger.cli._options import hoist_db

READ_COMMANDS = [
    ["events"], ["state", "s1"], ["assemble", "s1", "--profile", "card"], ["verify"],
    ["usage", "--scope", "alice"], ["brief-stats", "--scope", "alice"], ["export"],
    ["replay", "s1"], ["why", "s1", "mes_example"], ["audit"],
    ["fork", "s1", "s2", "--at", "1"],  # writes, but only a copy of a session that exists
    ["rebuild"],  # writes, but only what it reads from a log that exists
]


@pytest.fixture
def runner() -> CliRunner:
    """No ``CTXLEDGER_DB`` from the developer's shell."""
    return CliRunner(env={ENV_VAR: None, DEBUG_ENV_VAR: None, "COLUMNS": "160"})


def _append(runner: CliRunner, url: str, stream: str, *events: dict[str, Any]) -> None:
    body = "".join(json.dumps(e) + "\n" for e in events)
    done = runner.invoke(app, ["append", stream, "--db", url], input=body)
    assert done.exit_code == 0, done.stderr


# -- --db before or after the command ---------------------------------------------------------


def test_db_is_accepted_after_the_command(runner: CliRunner, tmp_path: Path) -> None:
    after = f"sqlite:///{tmp_path / 'after.db'}"
    before = f"sqlite:///{tmp_path / 'before.db'}"
    _append(runner, after, "s1", {"type": "session.started", "data": {"scope": "a"}})
    state = runner.invoke(app, ["state", "s1", "--db", after])
    assert state.exit_code == 0, state.stderr
    assert json.loads(state.stdout)["scope"] == "a"
    assert runner.invoke(app, ["state", f"--db={after}", "s1"]).exit_code == 0
    # Given twice, the one after the command (nearest to it) wins; before.db is not made.
    both = runner.invoke(app, ["--db", before, "events", "--db", after])
    assert both.exit_code == 0 and json.loads(both.stdout)["stream_id"] == "s1"
    assert not (tmp_path / "before.db").exists()


def test_db_after_the_command_beats_the_environment(runner: CliRunner, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'x.db'}"
    _append(runner, url, "s1", {"type": "session.started", "data": {}})
    other = f"sqlite:///{tmp_path / 'other.db'}"
    listed = runner.invoke(app, ["events", "--db", url], env={ENV_VAR: other})
    assert json.loads(listed.stdout)["stream_id"] == "s1"


@pytest.mark.parametrize(("args", "expected"), [
    (["state", "s1", "--db", "U"], ["--db", "U", "state", "s1"]),
    (["--db", "A", "state", "--db=U", "s1"], ["--db", "A", "--db=U", "state", "s1"]),
    (["--version"], ["--version"]),
    (["state", "--", "--db", "U"], ["state", "--", "--db", "U"]),  # after --: an argument
    (["state", "s1", "--db"], ["state", "s1", "--db"]),  # no value: parse_args says so
    (["demo", "--db", "U"], ["demo", "--db", "U"]),  # demo has an option of its own
    (["nope", "--db", "U"], ["nope", "--db", "U"]),
])
def test_hoist_db(args: list[str], expected: list[str]) -> None:
    from typer.main import get_command

    group = get_command(app)
    assert hoist_db(args, group) == expected  # type: ignore[arg-type]


def test_db_without_a_value_says_so(runner: CliRunner, tmp_path: Path,
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    for args in (["state", "s1", "--db"], ["events", "--after", "1", "--db"]):
        result = runner.invoke(app, args)
        assert result.exit_code == 2, args
        assert "'--db': needs a value: --db URL" in result.stderr, result.stderr
        assert "No such option" not in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_empty_db_is_a_usage_error(runner: CliRunner, tmp_path: Path) -> None:
    for args in (["--db", "", "state", "s1"], ["state", "s1", "--db", ""],
                 ["--db", "  ", "init"]):
        result = runner.invoke(app, args)
        assert result.exit_code == 2, args
        assert "'--db'" in result.stderr and "must not be empty" in result.stderr
        assert "Traceback" not in result.stderr
    assert list(tmp_path.iterdir()) == []


# -- read commands never create a database ----------------------------------------------------


@pytest.mark.parametrize("command", READ_COMMANDS, ids=lambda c: c[0])
def test_read_commands_refuse_a_missing_sqlite_file(runner: CliRunner, tmp_path: Path,
                                                    command: list[str]) -> None:
    path = tmp_path / "missing.db"
    result = runner.invoke(app, [*command, "--db", f"sqlite:///{path}"])
    one_error_line(result, f"no ctxledger database at sqlite:///{path};",
                   "run 'ctxledger init' or append to create one")
    assert not path.exists()
    assert list(tmp_path.iterdir()) == []


@pytest.mark.postgres
@pytest.mark.parametrize("command", READ_COMMANDS, ids=lambda c: c[0])
def test_read_commands_refuse_a_postgres_schema_without_a_log(
        runner: CliRunner, pg_url: str, command: list[str]) -> None:
    result = runner.invoke(app, [*command, "--db", pg_url])
    one_error_line(result, "no ctxledger database at postgresql+psycopg://",
                   "run 'ctxledger init' or append to create one")
    engine = sa.create_engine(pg_url)
    try:
        with engine.connect() as conn:
            assert sa.inspect(conn).get_table_names() == []  # nothing was created
    finally:
        engine.dispose()


def test_the_default_database_is_not_created_by_a_read(
        runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.delenv(ENV_VAR, raising=False)
    one_error_line(runner.invoke(app, ["events"]),
                   f"sqlite:///{tmp_path / 'data' / 'ctxledger' / 'ledger.db'}")
    assert not (tmp_path / "ctxledger.db").exists()
    assert not (tmp_path / "data" / "ctxledger" / "ledger.db").exists()


def test_write_commands_still_create_the_database(runner: CliRunner,
                                                  empty_db_url: str) -> None:
    assert runner.invoke(app, ["init", "--db", empty_db_url]).exit_code == 0
    listed = runner.invoke(app, ["events", "--db", empty_db_url])
    assert listed.exit_code == 0 and listed.stdout == ""


def _nothing_created(url: str) -> None:
    if url.startswith("sqlite"):
        assert not Path(url.removeprefix("sqlite:///")).exists()
        return
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            assert sa.inspect(conn).get_table_names() == []
    finally:
        engine.dispose()


@pytest.mark.parametrize(("command", "body", "needle"), [
    (["append", "s1"], '{"type": "nope", "data": {}}\n', "line 1: unknown event type 'nope'"),
    (["append", "s1"], '{"type": "session.started", "data": {"scope": "a"}}\n'
                       '{"type": "message.appended", "data": {"role": "bot", "content": "x"}}\n',
     "line 2: message.appended: role"),
    (["append", "s1"], '{"type": "setting.changed", "data": {"key": "agent_manifests",'
                       ' "value": {"planner": {"fields": ["x"], "exclude": ["x"]}}}}\n',
     "line 1: "),
    (["rebuild", "--projection", "nosuch"], "", "unknown projection 'nosuch'; known: "),
], ids=["unknown-type", "bad-field", "bad-manifest", "unknown-projection"])
def test_bad_input_to_a_write_command_creates_no_database(
        runner: CliRunner, empty_db_url: str, command: list[str], body: str,
        needle: str) -> None:
    """The input is checked before the database is opened: a refused append or rebuild
    leaves no empty database behind, on either backend."""
    one_error_line(runner.invoke(app, [*command, "--db", empty_db_url], input=body), needle)
    _nothing_created(empty_db_url)


def test_in_memory_sqlite_is_never_missing(runner: CliRunner) -> None:
    result = runner.invoke(app, ["events", "--db", "sqlite://"])
    assert result.exit_code == 0, result.stderr
    assert result.stdout == ""


def test_ledger_open_without_create(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'l.db'}"
    with pytest.raises(Exception, match="no ctxledger database at"):
        Ledger.open(url, create=False)
    assert not (tmp_path / "l.db").exists()
    with Ledger.open(url):
        pass
    with Ledger.open(url, create=False) as ledger:
        assert ledger.head() == 0


def test_a_stream_never_written_is_an_error(runner: CliRunner, db_url: str) -> None:
    _append(runner, db_url, "s1", {"type": "session.started", "data": {}})
    for command in (["events", "s2"], ["events", "s2", "--format", "text"], ["export", "s2"]):
        result = runner.invoke(app, [*command, "--db", db_url])
        assert result.stdout == ""
        one_error_line(result, "unknown stream 's2': it has no events")
    # A stream that exists, cut before its first event, is just empty.
    for command in (["events", "s1", "--after", "1"], ["export", "s1", "--until", "0"]):
        result = runner.invoke(app, [*command, "--db", db_url])
        assert result.exit_code == 0 and result.stdout == "", result.stderr


# -- URLs refused up front --------------------------------------------------------------------


def test_read_only_sqlite_is_refused_in_one_line(runner: CliRunner, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'x.db'}"
    _append(runner, url, "s1", {"type": "session.started", "data": {}})
    gc.collect()  # a connection the append left to the collector checkpoints on close
    before = (tmp_path / "x.db").read_bytes()
    for command in (["state", "s1"], ["events"], ["init"]):
        result = runner.invoke(app, [*command, "--db", url + "?mode=ro"])
        one_error_line(result, "read-only SQLite URLs are not supported")
    assert (tmp_path / "x.db").read_bytes() == before


@pytest.mark.parametrize("query", ["immutable=1", "mode=rw", "foo=bar", "uri=true",
                                   "mode=ro&uri=true", "timeout=5"])
def test_sqlite_query_arguments_are_refused_in_one_line(runner: CliRunner, tmp_path: Path,
                                                        query: str) -> None:
    # SQLAlchemy ignores most of them with a two-line warning; uri=true opens another file.
    url = f"sqlite:///{tmp_path / 'x.db'}"
    _append(runner, url, "s1", {"type": "session.started", "data": {}})
    gc.collect()  # a connection the append left to the collector checkpoints on close
    before = (tmp_path / "x.db").read_bytes()
    for command in (["state", "s1"], ["init"]):
        result = runner.invoke(app, [*command, "--db", f"{url}?{query}"])
        one_error_line(result, "SQLite URL" if "ro" not in query and "immutable" not in query
                       else "read-only SQLite URLs are not supported")
    assert (tmp_path / "x.db").read_bytes() == before
    assert all(p.name.startswith("x.db") for p in tmp_path.iterdir())  # and its WAL files


def test_postgres_without_its_extra_names_the_extra(
        runner: CliRunner, monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "psycopg" else real(name, *a))
    for url in ("postgresql+psycopg://u@127.0.0.1/db", "postgresql://u@127.0.0.1/db"):
        result = runner.invoke(app, ["events", "--db", url])
        line = one_error_line(result, "pip install 'ctxledger[postgres]'")
        assert line == ("error: PostgreSQL needs the postgres extra:"
                        " pip install 'ctxledger[postgres]'")


# -- limits -------------------------------------------------------------------------------------


def test_negative_limit_or_after_is_an_error(ledger: Ledger) -> None:
    ledger.append("s", [{"type": "session.started", "data": {}},
                        {"type": "session.ended", "data": {}}])
    for kwargs in ({"limit": -1}, {"after": -1}):
        for stream in ("s", None):
            with pytest.raises(InvalidArgument, match=">= 0"):
                ledger.events(stream, **kwargs)
    assert len(ledger.events("s", limit=2)) == 2  # the last event is not dropped
    assert ledger.events("s", limit=0) == []
    with pytest.raises(ValueError):  # InvalidArgument is a ValueError too
        ledger.events("s", limit=-1)


def test_bounds_beyond_64_bits_mean_no_bound(ledger: Ledger) -> None:
    # No position exceeds 64 bits; the drivers overflowed on such bounds, each its own way.
    ledger.append("s", [{"type": "session.started", "data": {}},
                        {"type": "session.ended", "data": {}}])
    huge = 2**64
    for stream in ("s", None):
        assert ledger.events(stream, after=huge) == []
        assert len(ledger.events(stream, limit=huge)) == 2
        assert len(ledger.events(stream, until=huge)) == 2


def test_huge_cli_positions_are_answered_not_crashed(runner: CliRunner, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'x.db'}"
    _append(runner, url, "s1", {"type": "session.started", "data": {}})
    huge = str(2**80)
    after = runner.invoke(app, ["events", "--after", huge, "--db", url])
    assert after.exit_code == 0 and after.stdout == "", after.stderr
    # A point past any position a log can hold is named, as the service names it.
    one_error_line(runner.invoke(app, ["export", "--until", huge, "--db", url]),
                   "is past the largest log position")
    # Digits of other scripts are not a position (int() would read them as one).
    for command in (["export"], ["replay", "s1"]):
        one_error_line(runner.invoke(app, [*command, "--until", "\uff11", "--db", url]),
                       "neither a log position nor an ISO-8601 time")


def test_negative_cli_limits_are_usage_errors(runner: CliRunner, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'x.db'}"
    _append(runner, url, "s1", {"type": "session.started", "data": {}})
    for args in (["events", "--limit", "-1"], ["events", "s1", "--after", "-1"]):
        result = runner.invoke(app, [*args, "--db", url])
        assert result.exit_code == 2, args
        assert "Traceback" not in result.stderr


def test_shell_completion_is_offered(runner: CliRunner) -> None:
    # A real process. Typer detects the shell from the process tree, which a test run
    # (or CI) may not have; its test switch makes --show-completion take the shell named.
    cli = Path(sys.executable).with_name("ctxledger")
    env = {**os.environ, "_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION": "1"}
    shown = subprocess.run([str(cli), "--show-completion", "bash"], capture_output=True,
                           text=True, env=env, timeout=60, check=False)
    assert shown.returncode == 0, shown.stderr
    assert "complete" in shown.stdout and "ctxledger" in shown.stdout
    assert "--install-completion" in runner.invoke(app, ["--help"]).stdout
