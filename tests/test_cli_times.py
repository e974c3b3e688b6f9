"""One parser reads every time and position option: a bad value is a domain error (exit
1) with the same one ``error:`` line on every command that takes it, and writes nothing."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.assertions import one_error_line
from typer.testing import CliRunner

from ctxledger import Ledger
from ctxledger.cli import app

NOW_COMMANDS = [["state", "s1"], ["assemble", "s1", "--profile", "card"], ["replay", "s1"],
                ["rollup"], ["usage", "--scope", "default"]]
UNTIL_COMMANDS = [["export"], ["export", "s1"], ["replay", "s1"],
                  ["why", "s1", "mes_example"]]

BAD_NOW = [
    ("yesterday", "--now 'yesterday' is not an ISO-8601 time"),
    ("2025-05-01T10:00:00", "--now '2025-05-01T10:00:00' needs a zone, such as Z or +00:00"),
    ("1800-01-01T00:00:00Z",
     "--now '1800-01-01T00:00:00Z' is outside 1900-01-01 .. 9999-01-01"),
    ("9999-01-01T00:00:00+00:00",
     "--now '9999-01-01T00:00:00+00:00' is outside 1900-01-01 .. 9999-01-01"),
    ("9" * 5000, f"--now {'9' * 40!r}... (5000 characters) is not an ISO-8601 time"),
]
BAD_UNTIL = [
    ("yesterday", "--until 'yesterday' is neither a log position nor an ISO-8601 time"),
    # Digits of other scripts are not a position (int() would read them as one).
    ("\uff11", "--until '\uff11' is neither a log position nor an ISO-8601 time"),
    ("2025-05-01T10:00:00",
     "--until '2025-05-01T10:00:00' needs a zone, such as Z or +00:00"),
    ("0001-01-01T00:00:00+01:00",
     "--until '0001-01-01T00:00:00+01:00' is outside 1900-01-01 .. 9999-01-01"),
    # More digits than int() converts, and one past what a backend stores.
    ("9" * 5000, f"--until {'9' * 40!r}... (5000 characters) is past the largest log"
                 " position (9223372036854775807)"),
    (str(2**63), f"--until '{2**63}' is past the largest log position"
                 " (9223372036854775807)"),
    ("-5", "--until '-5' is neither a log position nor an ISO-8601 time"),
]


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> str:
    found = f"sqlite:///{tmp_path_factory.mktemp('times') / 'x.db'}"
    with Ledger.open(found, load_vocabulary=False) as ledger:
        ledger.append("s1", {"type": "session.started", "data": {}})
    return found


def _head(url: str) -> int:
    with Ledger.open(url, load_vocabulary=False) as ledger:
        return ledger.head()


@pytest.mark.parametrize(("value", "message"), BAD_NOW)
@pytest.mark.parametrize("command", NOW_COMMANDS, ids=" ".join)
def test_a_bad_now_is_the_same_error_everywhere(url: str, command: list[str], value: str,
                                                 message: str) -> None:
    result = CliRunner().invoke(app, [*command, "--now", value, "--db", url])
    assert one_error_line(result) == f"error: {message}"
    assert _head(url) == 1


@pytest.mark.parametrize(("value", "message"), BAD_UNTIL)
@pytest.mark.parametrize("command", UNTIL_COMMANDS, ids=" ".join)
def test_a_bad_until_is_the_same_error_everywhere(url: str, command: list[str], value: str,
                                                   message: str) -> None:
    result = CliRunner().invoke(app, [*command, "--until", value, "--db", url])
    assert one_error_line(result) == f"error: {message}"
    assert _head(url) == 1


@pytest.mark.parametrize("value", ["25:00", "3", "03:7", "\uff10\uff13:00", "noon",
                                   "9" * 5000 + ":00", "007:00"])
def test_a_bad_time_of_day_is_one_error_line(url: str, value: str, tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["scheduler", "--at", value, "--db", url])
    assert one_error_line(result) == (
        f"error: --at {value!r} is not a time of day: expected HH:MM (UTC)")


def test_a_good_time_and_position_are_read_alike(url: str) -> None:
    # The value is trimmed, and a zone other than UTC is converted.
    by_time = CliRunner().invoke(
        app, ["export", "--until", " 2999-01-01T01:00:00+01:00 ", "--db", url])
    by_position = CliRunner().invoke(app, ["export", "--until", " 1 ", "--db", url])
    assert by_time.exit_code == by_position.exit_code == 0, by_time.stderr
    assert by_time.stdout == by_position.stdout and by_time.stdout.count("\n") == 1
