"""The assembler's entry points: profiles, policies, counters and bad input."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta

import pytest

from ctxledger.assembler import TokenCounter, assemble, counter_for, policy_for, request_for
from ctxledger.assembler.errors import AssemblyError
from ctxledger.assembler.profiles import profile_names
from ctxledger.assembler.profiles.card import CardReport
from ctxledger.assembler.tokens import TokenCount
from ctxledger.projections.session_view import (
    History,
    Message,
    MessageCounts,
    Observation,
    PreviousSession,
    SessionView,
    Tool,
)
from ctxledger.store.errors import LedgerError

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def card_view(settings: dict[str, object] | None = None, *, exists: bool = True) -> SessionView:
    message = Message(seq=2, message_id="m1", role="user", name="ana",
                      content="Hello there, how are you?", position=5, recorded_at=NOW)
    return SessionView(stream_id="chat", scope="s", position=5, exists=exists,
                       counts=MessageCounts(user=1, total=1), settings=settings or {},
                       card={"name": "Bo", "description": "A calm sailor."},
                       history=History(summary=None, messages=(message,), complete=True,
                                       summarized_count=0))


def test_registered_profiles() -> None:
    assert profile_names() == ["brief", "card", "novel", "session"]


def test_unknown_profile_lists_the_known_ones() -> None:
    known = r"\(known: brief, card, novel, session\)"
    with pytest.raises(LedgerError, match=r"unknown profile 'poem' " + known):
        assemble(card_view(), "poem", NOW)
    with pytest.raises(AssemblyError):
        policy_for("poem", {})


def test_unknown_session_is_refused() -> None:
    with pytest.raises(AssemblyError, match="unknown session 'chat'"):
        assemble(card_view(exists=False), "card", NOW)


def test_naive_now_is_refused() -> None:
    with pytest.raises(AssemblyError, match="timezone-aware"):
        assemble(card_view(), "card", datetime(2026, 3, 1, 12, 0))


def test_policy_of_another_profile_is_refused() -> None:
    with pytest.raises(AssemblyError, match="needs a CardPolicy, got SessionPolicy"):
        assemble(card_view(), "card", NOW, policy_for("session", {}))
    with pytest.raises(AssemblyError, match="needs a SessionPolicy"):
        request_for("session", policy_for("card", {}), NOW)


def test_counter_must_match_the_policy_encoding() -> None:
    with pytest.raises(AssemblyError, match="'chars4' but the policy says 'cl100k_base'"):
        assemble(card_view(), "card", NOW, policy_for("card", {}), TokenCounter("chars4"))


def test_policy_defaults_to_the_view_settings() -> None:
    assembly = assemble(card_view({"token_encoding": "chars4", "user_name": "Kim"}), "card",
                        NOW)
    assert assembly.policy_version.startswith("card@5+")
    # The card app's estimate is over UTF-16 lengths; the method names the unit.
    assert assembly.tokens.encoding == "chars4"
    assert assembly.tokens.methods == ["chars4:utf16"]
    assert isinstance(assembly.report, CardReport)
    line = "ana: Hello there, how are you?"
    # A message costs what a chat API counts: 3, its role, its content, its name and 1.
    assert assembly.sections[1].items[0].tokens == 3 + math.ceil(len("user") / 4) + (
        math.ceil(len("Hello there, how are you?") / 4)) + math.ceil(len("ana") / 4) + 1
    assert assembly.text.endswith(line)


def test_counter_for_uses_the_policy_encoding() -> None:
    counter = counter_for(policy_for("card", {"token_encoding": "chars4"}))
    assert counter.encoding == "chars4" and counter.count("abcdefgh") == 2


class CountingStore:
    """A token cache that knows nothing and counts the round trips made to it."""

    def __init__(self) -> None:
        self.lookups = 0

    def load(self, encoding: str, hashes: Sequence[str]) -> Mapping[str, TokenCount]:
        self.lookups += 1
        return {}


def test_the_token_cache_is_consulted_in_few_round_trips() -> None:
    messages = tuple(Message(seq=i + 2, message_id=f"m{i}", role="user", name=None,
                             content=f"message {i}", position=i, recorded_at=NOW)
                     for i in range(30))
    view = SessionView(stream_id="chat", scope="s", position=40, exists=True,
                       counts=MessageCounts(user=30, total=30),
                       card={"name": "Bo", "description": "A calm sailor."},
                       history=History(summary=None, messages=messages, complete=True,
                                       summarized_count=0))
    store = CountingStore()
    policy = policy_for("card", {})
    assemble(view, "card", NOW, policy, counter_for(policy, store=store))
    # Everything known up front, then the template's own text, then the memory as one
    # message (counted whole, as a chat API counts it).
    assert store.lookups <= 3


def test_session_consults_the_token_cache_in_few_round_trips() -> None:
    tools = tuple(Tool(f"/tool-{i:02d}", "slash_command", None, None, i) for i in range(60))
    observations = tuple(Observation("change", f"change {i}", None, NOW, i, "old")
                         for i in range(15))
    view = SessionView(stream_id="s", scope="p", position=99, exists=True, tools=tools,
                       usage_window=(NOW - timedelta(days=7), NOW), observations=observations,
                       previous_session=PreviousSession("old", "Did work.", NOW, 3))
    store = CountingStore()
    policy = policy_for("session", {})
    assembly = assemble(view, "session", NOW, policy, counter_for(policy, store=store))
    assert "- /tool-00" in assembly.text and "- change 14" in assembly.text
    assert store.lookups <= 2  # everything known up front, then a frame with an overflow
