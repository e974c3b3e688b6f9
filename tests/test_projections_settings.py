"""Settings resolve as session override, else scope default, else absent."""

from __future__ import annotations

from typing import Any

from ctxledger import Ledger


def setting(key: str, value: Any) -> dict[str, Any]:
    return {"type": "setting.changed", "data": {"key": key, "value": value}}


def test_session_over_scope_over_absent(ledger: Ledger) -> None:
    ledger.append("s1", {"type": "session.started", "data": {"scope": "proj"}})
    ledger.append("s2", {"type": "session.started", "data": {"scope": "proj"}})
    ledger.append("s3", {"type": "session.started", "data": {"scope": "elsewhere"}})
    ledger.append("scope:proj", [setting("compression_level", "chat_only"),
                                 setting("context_limit", 8000)])
    ledger.append("s1", setting("compression_level", "aggressive"))

    s1, s2, s3 = ledger.view("s1"), ledger.view("s2"), ledger.view("s3")
    assert s1.settings == {"compression_level": "aggressive", "context_limit": 8000}
    assert s1.setting_sources == {"compression_level": "session", "context_limit": "scope"}
    assert s2.settings == {"compression_level": "chat_only", "context_limit": 8000}
    assert s2.setting_sources == {"compression_level": "scope", "context_limit": "scope"}
    assert s3.settings == {} and s3.setting_sources == {}


def test_scope_default_changes_reach_sessions_without_override(ledger: Ledger) -> None:
    ledger.append("s1", {"type": "session.started", "data": {"scope": "proj"}})
    ledger.append("s2", {"type": "session.started", "data": {"scope": "proj"}})
    ledger.append("s1", setting("level", "none"))
    ledger.append("scope:proj", setting("level", "chat_only"))
    ledger.append("scope:proj", setting("level", "aggressive"))
    assert ledger.view("s1").settings == {"level": "none"}
    assert ledger.view("s2").settings == {"level": "aggressive"}


def test_values_are_json_and_keys_sorted(ledger: Ledger) -> None:
    values = {"z_obj": {"b": [1, 2], "a": None}, "a_null": None, "m_list": ["x", 1.5, True],
              "b_num": 3}
    ledger.append("s", [setting(k, v) for k, v in values.items()])
    ledger.append("s", setting("b_num", 4))
    view = ledger.view("s")
    assert list(view.settings) == ["a_null", "b_num", "m_list", "z_obj"]
    assert view.settings == {**values, "b_num": 4}


def test_default_scope_defaults_apply_to_sessions_without_a_scope(ledger: Ledger) -> None:
    ledger.append("scope:default", setting("token_encoding", "o200k_base"))
    ledger.append("s", {"type": "message.appended", "data": {"role": "user", "content": "x"}})
    assert ledger.view("s").settings == {"token_encoding": "o200k_base"}
    assert ledger.view("unknown").settings == {"token_encoding": "o200k_base"}
