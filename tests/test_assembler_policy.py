"""Policies: SPEC defaults, settings overlay, versions, whole-policy JSON."""

from __future__ import annotations

import pytest

from ctxledger.assembler import Policy, PolicyError, parse_policy, policy_for
from ctxledger.assembler.profiles.card import LEVELS, CardPolicy
from ctxledger.assembler.profiles.session import SessionPolicy
from ctxledger.store.errors import LedgerError


def test_card_defaults_are_the_spec_values() -> None:
    policy = policy_for("card", {})
    assert isinstance(policy, CardPolicy)
    assert policy.levels == LEVELS == ("none", "chat_only", "chat_dialogue", "aggressive")
    assert policy.compression_level == "none"
    assert policy.token_encoding == "cl100k_base"
    assert policy.user_name == "User"
    assert policy.context_limit is None and policy.pressure_threshold == 0.8
    table = {rule.key: (rule.label, rule.permanent, rule.expires_at_message, rule.min_level)
             for rule in policy.fields}
    assert table == {
        "system_prompt": ("System Prompt", True, None, "none"),
        "description": ("Description", True, None, "none"),
        "personality": ("Personality", True, None, "none"),
        "scenario": ("Scenario", False, 3, "aggressive"),
        "mes_example": ("Example Dialogue", False, 5, "chat_dialogue"),
        "first_mes": ("First Message", False, 3, "aggressive"),
    }
    assert policy.length_unit == "utf16"  # the app's String.length
    assert policy.version == "card@5"
    # What a chat API adds around messages (OpenAI's cookbook figures), and the role of
    # the message a profile builds from its own text.
    overhead = policy.message_overhead
    assert (overhead.per_message, overhead.per_name, overhead.reply_priming,
            overhead.per_tool_call, overhead.per_media_part) == (3, 1, 3, 3, 85)
    assert policy.context_role == "system"
    assert policy_for("card", {"context_role": "developer"}).context_role == "developer"


def test_session_defaults_are_the_spec_values() -> None:
    policy = policy_for("session", {})
    assert isinstance(policy, SessionPolicy)
    assert (policy.max_chars, policy.tool_section_budget, policy.usage_window_days) == (
        6000, 500, 7)
    assert (policy.frequency_weight, policy.recency_weight, policy.recency_decay,
            policy.recency_half_life_days) == (0.7, 0.3, 0.693, 7.0)
    assert policy.observation_max_chars == 120
    assert policy.mcp_server_pattern == r"^mcp__([^_]+(?:_[^_]+)*)__"
    assert policy.trim_order[:4] == ("tools", "reference", "finding", "change")
    assert policy.length_unit == "utf16"  # the app's String.length
    assert policy.version == "session@3"


def test_named_settings_override_and_change_the_version() -> None:
    settings = {"compression_level": "aggressive", "context_limit": 4096,
                "user_name": "Sam", "unrelated_setting": [1, 2]}
    policy = policy_for("card", settings)
    assert isinstance(policy, CardPolicy)
    assert (policy.compression_level, policy.context_limit, policy.user_name) == (
        "aggressive", 4096, "Sam")
    assert policy.version.startswith("card@5+")
    assert policy_for("card", dict(reversed(list(settings.items())))).version == policy.version
    assert policy_for("card", {**settings, "user_name": "Alex"}).version != policy.version
    assert policy_for("card", {"unrelated_setting": 1}).version == "card@5"


def test_expiration_table_is_overridable_per_field() -> None:
    policy = policy_for("card", {"card_expiration": {"mes_example": {"expires_at_message": 8},
                                                     "scenario": {"min_level": "chat_only"}}})
    assert isinstance(policy, CardPolicy)
    assert policy.rule("mes_example").expires_at_message == 8
    assert policy.rule("mes_example").min_level == "chat_dialogue"
    assert policy.rule("scenario").min_level == "chat_only"
    assert policy.should_expire("scenario", "chat_only", 3)


def test_generic_policy_setting_reaches_every_knob_and_named_settings_win() -> None:
    policy = policy_for("session", {"policy.session": {"frequency_weight": 0.5,
                                                       "tool_section_budget": 300},
                                    "tool_section_budget": 400})
    assert isinstance(policy, SessionPolicy)
    assert (policy.frequency_weight, policy.tool_section_budget) == (0.5, 400)


@pytest.mark.parametrize(("settings", "fragment"), [
    ({"compression_level": "extreme"}, "setting 'compression_level'"),
    ({"context_limit": -5}, "setting 'context_limit'"),
    ({"card_template": "{{system}} {{sytem}}"},
     "setting 'card_template': template uses unknown variable {{sytem}}"),
    ({"card_template": "{{#if system}}{{system}}"}, "without {{/if}}"),
    ({"card_template": "{{/if}}"}, "without a matching"),
    ({"card_expiration": ["not", "an", "object"]}, "card_expiration"),
    ({"card_expiration": {"scenario": {"min_level": "max"}}}, "scenario.min_level"),
    ({"policy.card": "nope"}, "policy.card"),
])
def test_bad_settings_are_one_line_ledger_errors(settings: dict[str, object],
                                                 fragment: str) -> None:
    with pytest.raises(LedgerError) as raised:
        policy_for("card", settings)
    assert isinstance(raised.value, PolicyError)
    assert fragment in str(raised.value)
    assert "\n" not in str(raised.value)


def test_bad_session_settings() -> None:
    with pytest.raises(PolicyError, match="setting 'usage_window_days'"):
        policy_for("session", {"usage_window_days": 0})
    with pytest.raises(PolicyError, match="trim_order"):
        policy_for("session", {"policy.session": {"trim_order": ["tools", "gossip"]}})


@pytest.mark.parametrize("profile", ["card", "session"])
def test_a_whole_policy_round_trips_through_json(profile: str) -> None:
    settings = {"compression_level": "chat_dialogue"} if profile == "card" else {
        "usage_window_days": 3}
    policy = policy_for(profile, settings)
    text = policy.model_dump_json()
    again = parse_policy(text)
    assert type(again) is type(policy)
    assert again == policy and again.version == policy.version
    assert Policy.model_validate_json(text) == policy
    assert Policy.model_validate(policy.model_dump(mode="json")) == policy


def test_whole_policy_errors() -> None:
    with pytest.raises(PolicyError, match="no policy for profile 'poem'"):
        Policy.model_validate({"profile": "poem"})
    with pytest.raises(PolicyError, match="string 'profile'"):
        Policy.model_validate({"max_chars": 5})
    with pytest.raises(PolicyError, match="not valid JSON"):
        parse_policy("{nope")
    with pytest.raises(PolicyError, match="max_chars"):
        parse_policy({"profile": "session", "max_chars": "lots"})
    with pytest.raises(PolicyError, match="Extra inputs"):
        parse_policy({"profile": "card", "colour": "red"})


def test_token_encoding_is_checked_up_front() -> None:
    with pytest.raises(PolicyError, match="setting 'token_encoding': unknown token encoding"):
        policy_for("session", {"token_encoding": "cl999k"})
    for name in ("chars4", "o200k_base", "cl100k_base"):
        assert policy_for("card", {"token_encoding": name}).token_encoding == name
