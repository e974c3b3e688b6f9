"""The assembler on real projections (SQLite and PostgreSQL), driven the way the facade
will drive it: settings -> policy -> request -> view -> assemble -> persist the caches."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa
from freezegun import freeze_time

from ctxledger import Ledger
from ctxledger._token_store import save_cache_writes
from ctxledger.assembler import Assembly, counter_for, policy_for, request_for
from ctxledger.assembler.api import assemble_with_caches
from ctxledger.assembler.profiles.card import CardReport
from ctxledger.assembler.profiles.session import SessionReport
from ctxledger.assembler.tokens import TokenCount, TokenCounter
from ctxledger.projections.session_view import ViewRequest
from ctxledger.projections.token_cache import history_token_memo, load_counts, store_counts
from ctxledger.projections.view_loader import load_session_view

CARD = {"name": "Mara", "system_prompt": "You are {{char}}.",
        "description": "{{char}} captains an airship.", "personality": "Dry, decisive.",
        "scenario": "Becalmed above the Salt Wastes.",
        "mes_example": "{{user}}: Lost?\n{{char}}: Never.", "first_mes": "Tie it all down."}


class TableStore:
    """``TokenCountStore`` over the ``token_counts`` table on one connection."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    def load(self, encoding: str, hashes: Sequence[str]) -> Mapping[str, TokenCount]:
        found = load_counts(self.conn, encoding, hashes)
        return {key: TokenCount(tokens, method) for key, (tokens, method) in found.items()}


def facade_assemble(ledger: Ledger, session: str, profile: str,
                    now: datetime) -> tuple[Assembly, TokenCounter]:
    with ledger.log.transaction() as conn:
        settings = load_session_view(conn, session, ViewRequest()).settings
        policy = policy_for(profile, settings)
        counter = counter_for(policy, store=TableStore(conn))
        view = load_session_view(conn, session, request_for(profile, policy, now, counter))
        assembly, caches = assemble_with_caches(view, profile, now, policy, counter)
        store_counts(conn, counter.new_counts())
        save_cache_writes(conn, caches)
    return assembly, counter


def memo_rows(ledger: Ledger, session: str) -> list[tuple[int, int]]:
    """The history memos stored for ``session``: (through_seq, tokens)."""
    with ledger.log.connection() as conn:
        return [(int(row.through_seq), int(row.tokens)) for row in conn.execute(
            sa.select(history_token_memo.c.through_seq, history_token_memo.c.tokens)
            .where(history_token_memo.c.stream_id == session))]


def card_report(assembly: Assembly) -> CardReport:
    assert isinstance(assembly.report, CardReport)
    return assembly.report


def say(ledger: Ledger, session: str, message_id: str, text: str, role: str = "user") -> None:
    ledger.append(session, {"type": "message.appended",
                            "data": {"message_id": message_id, "role": role, "content": text}})


def test_card_on_real_projections(ledger: Ledger) -> None:
    now = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
    ledger.append("scope:alice", {"type": "setting.changed",
                                  "data": {"key": "compression_level", "value": "aggressive"}})
    ledger.append("chat", [{"type": "session.started", "data": {"scope": "alice"}},
                           {"type": "card.set", "data": CARD},
                           {"type": "setting.changed",
                            "data": {"key": "compression_level", "value": "chat_dialogue"}}])
    for index in range(1, 6):
        say(ledger, "chat", f"m{index}", f"Line number {index} of the voyage.",
            ("user", "assistant")[index % 2])

    five, _ = facade_assemble(ledger, "chat", "card", now)
    report = five.report
    assert isinstance(report, CardReport)
    # The session's chat_dialogue wins over the scope's aggressive.
    assert (report.compression_level, report.message_count) == ("chat_dialogue", 5)
    assert five.decision("mes_example").action == "expired"
    assert five.decision("scenario").action == "included"

    ledger.append("chat", {"type": "message.retracted", "data": {"message_id": "m5"}})
    four, _ = facade_assemble(ledger, "chat", "card", now)
    assert four.decision("mes_example").action == "included"
    assert "Line number 5" not in four.text

    ledger.append("chat", {"type": "history.summarized",
                           "data": {"through_message_id": "m3", "summary": "They set sail."}})
    first, _ = facade_assemble(ledger, "chat", "card", now)
    history = card_report(first).chat_history
    assert history.summarized_messages == 3 and history.messages == 1
    assert len(memo_rows(ledger, "chat")) == 1
    assert "They set sail." in first.text and "Line number 2" not in first.text

    say(ledger, "chat", "m6", "A new line after the summary.")
    again, counter = facade_assemble(ledger, "chat", "card", now)
    again_history = card_report(again).chat_history
    # Only the new message was counted: everything else came from the caches.
    assert counter.calls == 1
    # The new message costs what a chat API counts: 3 per message, its role, its content.
    counted = TokenCounter()
    assert again_history.summarized_from == history.summarized_from + 3 + \
        counted.count("user") + counted.count("A new line after the summary.")

    ledger.append("chat", {"type": "setting.changed",
                           "data": {"key": "compression_level", "value": "none"}})
    lowered, _ = facade_assemble(ledger, "chat", "card", now)
    assert "Line number 2" in lowered.text and "They set sail." not in lowered.text
    assert all(row.status != "expired" for row in card_report(lowered).breakdown)


def test_session_on_real_projections(ledger: Ledger) -> None:
    with freeze_time("2026-03-01T12:00:00Z") as frozen:
        ledger.append("scope:proj", [
            {"type": "tool.registered", "data": {"name": "/deploy",
                                                 "tool_type": "slash_command"}},
            {"type": "tool.registered", "data": {"name": "github", "tool_type": "mcp_server",
                                                 "server_name": "github"}},
            {"type": "tool.registered", "data": {"name": "Read", "tool_type": "builtin"}},
        ])
        ledger.append("old", [{"type": "session.started", "data": {"scope": "proj"}}])
        for _ in range(4):
            ledger.append("old", {"type": "tool.used", "data": {"tool_name": "/deploy"}})
        frozen.tick(timedelta(days=2))
        for _ in range(3):
            ledger.append("old", {"type": "tool.used",
                                  "data": {"tool_name": "mcp__github__create_pr"}})
        ledger.append("old", [
            {"type": "observation.recorded",
             "data": {"kind": "decision", "content": "Deploy from main only."}},
            {"type": "session.ended", "data": {"summary": "Set up the deploy pipeline."}}])
        frozen.tick(timedelta(hours=1))
        ledger.append("new", {"type": "session.started", "data": {"scope": "proj"}})

        now = datetime.now(UTC)
        first, _ = facade_assemble(ledger, "new", "session", now)
        report = first.report
        assert isinstance(report, SessionReport)
        assert "## Previous Session\nSet up the deploy pipeline." in first.text
        assert "- Deploy from main only. (1 hour ago)" in first.text
        assert [tool.name for tool in report.tools] == ["/deploy", "github"]
        assert first.text.endswith("## Available Tools\n- /deploy (4x)\n- MCP: github (3x)")

        frozen.tick(timedelta(days=5, hours=12))  # /deploy's uses are now 7.5 days old
        later_now = datetime.now(UTC)
        later, _ = facade_assemble(ledger, "new", "session", later_now)
        later_report = later.report
        assert isinstance(later_report, SessionReport)
        assert [tool.name for tool in later_report.tools] == ["github", "/deploy"]
        deploy = later_report.tools[1]
        assert (deploy.window_count, deploy.lifetime_count, deploy.score) == (0, 4, 0.0)
        assert later.decision("tool:Read").reason == "excluded_tool_type"
