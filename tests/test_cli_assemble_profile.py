"""``assemble``: the profile is --profile, else the session's ``profile`` setting, and
``--format text`` says which; the context text follows the breakdown unless --no-text."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ctxledger import Ledger, LedgerError
from ctxledger._config import ENV_VAR
from ctxledger.cli import app
from ctxledger.cli._errors import DEBUG_ENV_VAR

NOW = "2026-03-01T12:00:00Z"


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner(env={ENV_VAR: None, DEBUG_ENV_VAR: None, "COLUMNS": "160"})


def _session(url: str, profile: object | None, *, checked: bool = True) -> None:
    events: list[dict[str, object]] = [
        {"type": "session.started", "data": {"scope": "alice"}},
        {"type": "card.set", "data": {"name": "Ada", "description": "A lighthouse keeper."}},
        {"type": "message.appended", "data": {"role": "user", "content": "hello there"}},
    ]
    if profile is not None:
        events.append({"type": "setting.changed", "data": {"key": "profile", "value": profile}})
    with Ledger.open(url) as ledger:
        if not checked:  # as a release that did not check settings at append stored it
            ledger.log.check = None
        ledger.append("chat", events)


def test_profile_defaults_from_the_session_setting(runner: CliRunner, db_url: str) -> None:
    _session(db_url, "card")
    implicit = runner.invoke(app, ["assemble", "chat", "--now", NOW, "--db", db_url])
    explicit = runner.invoke(app, ["assemble", "chat", "--now", NOW, "--profile", "card",
                                   "--db", db_url])
    assert implicit.exit_code == 0, implicit.stderr
    assert json.loads(implicit.stdout)["profile"] == "card"
    assert json.loads(implicit.stdout)["digest"] == json.loads(explicit.stdout)["digest"]

    text = runner.invoke(app, ["assemble", "chat", "--now", NOW, "--format", "text",
                               "--db", db_url])
    assert text.stdout.splitlines()[0] == "profile card (from the session's profile setting)"
    assert "─ context" in text.stdout and "hello there" in text.stdout  # after the breakdown
    told = runner.invoke(app, ["assemble", "chat", "--now", NOW, "--format", "text",
                               "--profile", "session", "--no-text", "--db", db_url])
    assert told.exit_code == 0, told.stderr
    assert told.stdout.splitlines()[0] == "profile session (from --profile)"
    assert "─ context" not in told.stdout


def test_no_profile_anywhere_is_a_usage_error(runner: CliRunner, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'x.db'}"
    _session(url, None)
    result = runner.invoke(app, ["assemble", "chat", "--now", NOW, "--db", url])
    assert result.exit_code == 2
    assert "'--profile'" in result.stderr and "no 'profile' setting" in result.stderr
    assert result.stdout == ""


@pytest.mark.parametrize("value", ["nope", 3])
def test_an_unknown_profile_setting_is_one_line(runner: CliRunner, tmp_path: Path,
                                                value: object) -> None:
    url = f"sqlite:///{tmp_path / 'x.db'}"
    with pytest.raises(LedgerError, match="setting 'profile' is"):
        _session(url, value)  # refused at append now; a log an older release wrote:
    _session(url, value, checked=False)
    result = runner.invoke(app, ["assemble", "chat", "--now", NOW, "--db", url])
    assert result.exit_code == 1
    assert result.stderr.splitlines() == [
        f"error: the session's 'profile' setting is {value!r}, not one of"
        f" {', '.join(_profiles())}"]


def _profiles() -> list[str]:
    from ctxledger.assembler.profiles import profile_names

    return profile_names()
