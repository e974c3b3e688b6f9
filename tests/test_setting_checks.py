"""A setting no assembly could use is refused when it is appended, on SQLite and PostgreSQL.

The verdict is the policy models' own (``assembler.setting_check``): the same one line on
every append path (``Ledger.append``, ``ledger.log.append``, ``ctxledger append``,
``ctxledger import``), nothing written. A log that already holds such a setting (written
by an older release) fails its assemblies and ``why`` with that line too.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from typer.testing import CliRunner, Result

from ctxledger import Ledger
from ctxledger._config import ENV_VAR
from ctxledger.assembler.policy import PolicyError
from ctxledger.assembler.profiles import get_profile, profile_names
from ctxledger.cli import app
from ctxledger.cli._errors import DEBUG_ENV_VAR
from ctxledger.store.errors import EventValidationError

NOW = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)

BAD: list[tuple[str, Any, str]] = [
    # card
    ("compression_level", "ultra", "'ultra' is not one of none, chat_only"),
    ("context_limit", "lots", "setting 'context_limit': Input should be a valid integer"),
    ("context_limit", -5, "setting 'context_limit': Input should be greater than 0"),
    ("response_reserve", -1, "setting 'response_reserve'"),
    ("card_template", "{{#if system}}open", "setting 'card_template': template has"),
    ("card_template", "{{nope}}", "setting 'card_template'"),
    ("card_expiration", {"scenario": {"min_level": "extreme"}}, "'extreme'"),
    ("card_pressure_threshold", 1.5, "setting 'card_pressure_threshold'"),
    ("token_encoding", "no-such-encoding", "unknown token encoding 'no-such-encoding'"),
    ("policy.card", {"nope": 1}, "setting 'policy.card' (nope): Extra inputs"),
    ("policy.card", "x", "setting 'policy.card' must be a JSON object"),
    ("policy.card", {"overflow_order": ["system_prompt"]}, "permanent field"),
    # session
    ("usage_window_days", 0, "setting 'usage_window_days'"),
    ("session_max_chars", "many", "setting 'session_max_chars'"),
    ("tool_section_budget", 0, "setting 'tool_section_budget'"),
    ("policy.session", {"trim_order": ["gossip"]}, "trim_order step 'gossip'"),
    ("policy.session", {"mcp_server_pattern": "("}, "not a regular expression"),
    # novel
    ("warm_window", -1, "setting 'warm_window'"),
    ("hot_budget", "big", "setting 'hot_budget'"),
    ("policy.novel", {"priorities": {"exemplar": "top"}}, "(priorities.exemplar)"),
    # brief
    ("mmr_lambda", 2, "setting 'mmr_lambda'"),
    ("brief_max_snippets", -1, "setting 'brief_max_snippets'"),
    ("brief_max_tokens", 0, "setting 'brief_max_tokens'"),
    ("kb_mode", "wild", "setting 'kb_mode': Input should be 'neutral' or 'fan'"),
    ("banned_terms", [""], "setting 'banned_terms': banned_terms must not contain empty"),
    ("policy.brief", {"word_pattern": "("}, "is not a regular expression"),
    # read outside the policies
    ("profile", "nope", "setting 'profile' is 'nope', not one of brief, card, novel"),
    ("agent_manifests", {"executor": {"sees": 1}}, "agent_manifests"),
]


def _setting(key: str, value: Any) -> dict[str, Any]:
    return {"type": "setting.changed", "data": {"key": key, "value": value}}


def _one_line(exc: pytest.ExceptionInfo[BaseException], needle: str) -> None:
    message = str(exc.value)
    assert "\n" not in message, message
    assert message.removeprefix("event 2: ").startswith("setting.changed: "), message
    assert needle in message, message


@pytest.mark.parametrize(("key", "value", "needle"), BAD, ids=[f"{k}={v!r}" for k, v, _ in BAD])
def test_a_setting_that_cannot_work_is_refused_and_nothing_is_written(
        ledger: Ledger, key: str, value: Any, needle: str) -> None:
    ledger.append("chat", {"type": "session.started", "data": {"scope": "s"}})
    head = ledger.head()
    for stream in ("chat", "scope:s"):
        with pytest.raises(EventValidationError) as refused:
            ledger.append(stream, [_setting("user_name", "Kim"), _setting(key, value)])
        _one_line(refused, needle)
        # The store's own append path, as a script would use it.
        with pytest.raises(EventValidationError) as raw:
            ledger.log.append(stream, [_setting(key, value)])
        _one_line(raw, needle)
    assert ledger.head() == head
    assert ledger.assemble("chat", "card", now=NOW).text == ""


def test_every_named_setting_of_every_profile_is_checked_by_its_policy(ledger: Ledger) -> None:
    # Derived from the policy models, so a setting added to a profile is covered as is.
    keys = {f"policy.{name}" for name in profile_names()}
    for name in profile_names():
        keys |= set(get_profile(name).policy_type.SETTINGS)
    for key in sorted(keys):
        with pytest.raises(EventValidationError) as refused:
            ledger.append("scope:s", _setting(key, {"not": {"a": "setting"}}))
        assert f"setting {key!r}" in str(refused.value), key
    assert ledger.head() == 0


def test_good_settings_and_an_applications_own_keys_are_stored(ledger: Ledger) -> None:
    accepted: list[dict[str, Any]] = [
        _setting("my_app.theme", {"anything": ["goes", 1]}),  # no profile reads it
        _setting("policy.someone_else", "free form"),
        _setting("profile", "card"),
        _setting("card_expiration", {"scenario": {"expires_at_message": 9}}),
        _setting("banned_terms", "one term"),
        _setting("policy.card", {"levels": ["none", "chat_only", "chat_dialogue",
                                            "aggressive", "extreme"],
                                 "compression_level": "extreme"}),
    ]
    # Every named setting of every profile accepts its policy's default value.
    for name in profile_names():
        policy_type = get_profile(name).policy_type
        defaults = policy_type.defaults().model_dump(mode="json")
        for key, field in sorted(policy_type.SETTINGS.items()):
            if key != "card_expiration":  # merged per field key (given above)
                accepted.append(_setting(key, defaults[field]))
    ledger.append("chat", [{"type": "session.started", "data": {"scope": "s"}}, *accepted])
    ledger.append("scope:s", accepted)
    assert ledger.view("chat").settings["my_app.theme"] == {"anything": ["goes", 1]}
    for name in profile_names():
        ledger.assemble("chat", name, now=NOW)


# -- the CLI -----------------------------------------------------------------------------


def _cli(db_url: str, *args: str, body: str | None = None) -> Result:
    runner = CliRunner(env={ENV_VAR: None, DEBUG_ENV_VAR: None, "COLUMNS": "160"})
    return runner.invoke(app, ["--db", db_url, *args], input=body)


def _error_line(result: Result, needle: str) -> str:
    assert result.exit_code == 1, (result.stdout, result.stderr)
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert needle in lines[0], lines[0]
    assert "Traceback" not in result.output
    return lines[0]


def _positions(db_url: str) -> list[int]:
    engine = sa.create_engine(db_url)
    try:
        with engine.connect() as conn:
            return list(conn.execute(sa.text("SELECT position FROM events")).scalars())
    finally:
        engine.dispose()


def test_cli_append_and_import_refuse_it_with_one_line(empty_db_url: str,
                                                       tmp_path: Path) -> None:
    db_url = empty_db_url
    lines = [_setting("user_name", "Kim"), _setting("compression_level", "ultra")]
    body = "".join(json.dumps(line) + "\n" for line in lines)
    if db_url.startswith("sqlite"):  # refused before a database is made
        _error_line(_cli(db_url, "append", "chat", body=body), "line 2: setting.changed: ")
        assert not (tmp_path / "ledger.db").exists()
    assert _cli(db_url, "append", "chat", body=json.dumps(
        {"type": "session.started", "data": {"scope": "s"}})).exit_code == 0
    shown = _error_line(_cli(db_url, "append", "scope:s", body=body), "line 2: ")
    assert shown == ("error: line 2: setting.changed: invalid card policy: setting "
                     "'compression_level': 'ultra' is not one of none, chat_only, "
                     "chat_dialogue, aggressive")
    imported = "".join(json.dumps({"stream": "chat", **line}) + "\n" for line in [
        *lines[:1], _setting("context_limit", 4096), _setting("context_limit", "lots")])
    _error_line(_cli(db_url, "import", "-", body=imported),
                "line 3: setting.changed: invalid card policy: setting 'context_limit'")
    assert _positions(db_url) == [1]


# -- a log an older release wrote -------------------------------------------------------


@pytest.mark.parametrize(("key", "value", "needle"), [
    ("compression_level", "ultra", "setting 'compression_level': 'ultra' is not one of"),
    ("context_limit", -5, "setting 'context_limit': Input should be greater than 0"),
    ("card_template", "{{#if system}}open", "setting 'card_template': template has"),
])
def test_a_stored_bad_setting_fails_assembly_and_why_with_its_cause(
        db_url: str, key: str, value: Any, needle: str) -> None:
    with Ledger.open(db_url) as ledger:
        ledger.append("chat", {"type": "session.started", "data": {"scope": "s"}})
        ledger.append("old", {"type": "session.started", "data": {"scope": "s"}})
        ledger.append("old", {"type": "message.appended",
                              "data": {"role": "user", "content": "hi"}})
        ledger.log.check = None  # what a release without the check wrote
        ledger.append("scope:s", _setting(key, value))
        with pytest.raises(PolicyError, match="invalid card policy: " + needle[:20]):
            ledger.assemble("chat", "card", now=NOW)
        for session, item in (("chat", "mes_example"), ("old", "message:zzz")):
            with pytest.raises(PolicyError) as failed:
                ledger.why(session, item)
            assert needle in str(failed.value) and "not a candidate" not in str(failed.value)
    for args in (["assemble", "chat", "--profile", "card"], ["why", "chat", "description"]):
        _error_line(_cli(db_url, *args), needle)
