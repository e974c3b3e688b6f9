"""``Ledger.assemble`` and ``ctxledger assemble``: the facade over projections + assembler."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ctxledger import Ledger
from ctxledger.assembler.profiles.card import CardReport
from ctxledger.assembler.profiles.session import SessionReport
from ctxledger.cli import app

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
CARD = {"name": "Mara", "system_prompt": "You are {{char}}.", "description": "A captain.",
        "personality": "Dry.", "scenario": "Becalmed above the Salt Wastes.",
        "mes_example": "{{user}}: Lost?\n{{char}}: Never.", "first_mes": "Tie it down."}


def _chat(ledger: Ledger, messages: int, level: str = "chat_dialogue") -> None:
    ledger.append("chat", [{"type": "session.started", "data": {"scope": "alice"}},
                           {"type": "card.set", "data": CARD},
                           {"type": "setting.changed",
                            "data": {"key": "compression_level", "value": level}}])
    for i in range(messages):
        ledger.append("chat", {"type": "message.appended", "data": {
            "message_id": f"m{i}", "role": ("user", "assistant")[i % 2],
            "content": f"Line {i} of the voyage."}})


def test_card_fields_follow_level_and_count(ledger: Ledger) -> None:
    _chat(ledger, 4)
    at4 = ledger.assemble("chat", "card", now=NOW)
    assert at4.decision("mes_example").action == "included"
    ledger.append("chat", {"type": "message.appended",
                           "data": {"role": "user", "content": "fifth"}})
    at5 = ledger.assemble("chat", "card", now=NOW)
    assert at5.decision("mes_example").action == "expired"
    assert "Never." not in at5.text and "Never." in at4.text
    # Lowering the level brings the field back; retracting lowers the count.
    ledger.append("chat", {"type": "setting.changed",
                           "data": {"key": "compression_level", "value": "chat_only"}})
    assert ledger.assemble("chat", "card", now=NOW).decision("mes_example").action == "included"
    ledger.append("chat", [{"type": "setting.changed",
                            "data": {"key": "compression_level", "value": "chat_dialogue"}},
                           {"type": "message.retracted", "data": {"message_id": "m0"}}])
    again = ledger.assemble("chat", "card", now=NOW)
    assert isinstance(again.report, CardReport) and again.report.message_count == 4
    assert again.decision("mes_example").action == "included"


def test_reassembling_after_one_message_counts_only_the_new_content(ledger: Ledger) -> None:
    _chat(ledger, 20, level="none")
    first = ledger.assemble("chat", "card", now=NOW)
    before = ledger.tokenizer_calls()
    assert ledger.assemble("chat", "card", now=NOW).digest == first.digest
    assert ledger.tokenizer_calls() == before  # nothing changed, nothing counted
    ledger.append("chat", {"type": "message.appended",
                           "data": {"role": "user", "content": "A brand new line."}})
    ledger.assemble("chat", "card", now=NOW)
    assert ledger.tokenizer_calls() == before + 1


def test_counts_survive_in_the_cache_table(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'cache.db'}"
    with Ledger.open(url) as ledger:
        _chat(ledger, 6)
        digest = ledger.assemble("chat", "card", now=NOW).digest
    with Ledger.open(url) as reopened:  # a new process would start with an empty memo
        again = reopened.assemble("chat", "card", now=NOW)
        assert again.digest == digest
        assert reopened.tokenizer_calls() == 0


def test_session_profile_ranks_tools_over_the_window(ledger: Ledger) -> None:
    ledger.append("scope:proj", [
        {"type": "tool.registered", "data": {"name": n, "tool_type": "slash_command"}}
        for n in ("/alpha", "/beta")])
    ledger.append("s1", {"type": "session.started", "data": {"scope": "proj"}})
    for name in ("/alpha", "/beta", "/beta"):
        ledger.append("s1", {"type": "tool.used", "data": {"tool_name": name}})
    used_at = ledger.events("s1")[-1].recorded_at
    fresh = ledger.assemble("s1", "session", now=used_at + timedelta(hours=1))
    assert isinstance(fresh.report, SessionReport)
    assert [t.name for t in fresh.report.tools] == ["/beta", "/alpha"]
    later = ledger.assemble("s1", "session", now=used_at + timedelta(days=8))
    assert isinstance(later.report, SessionReport)
    assert all(t.window_count == 0 and t.score == 0 for t in later.report.tools)


def test_policy_override_changes_version_and_outcome(ledger: Ledger) -> None:
    _chat(ledger, 6)
    base = ledger.assemble("chat", "card", now=NOW)
    policy = {"profile": "card", "compression_level": "none"}
    other = ledger.assemble("chat", "card", now=NOW, policy=policy)
    assert other.policy_version != base.policy_version
    assert other.decision("mes_example").action == "included"


def test_record_assembly_appends_an_auditable_event(ledger: Ledger) -> None:
    _chat(ledger, 3)
    assembly = ledger.assemble("chat", "card", now=NOW)
    ledger.record_assembly("chat", assembly)
    recorded = ledger.events("chat")[-1]
    assert recorded.type == "context.assembled"
    assert recorded.data["digest"] == assembly.digest
    assert recorded.data["position"] == assembly.position


# -- CLI -----------------------------------------------------------------------------------


@pytest.fixture
def chat_db(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    with Ledger.open(url) as ledger:
        _chat(ledger, 7)
        ledger.append("chat", {"type": "history.summarized",
                               "data": {"through_message_id": "m3",
                                        "summary": "They set sail and argued."}})
    return url


def test_assemble_in_two_processes_with_different_hash_seeds(chat_db: str) -> None:
    outputs = []
    for seed in ("1", "4242"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        done = subprocess.run(
            [sys.executable, "-m", "ctxledger.cli", "--db", chat_db, "assemble", "chat",
             "--profile", "card", "--now", "2026-03-01T12:00:00Z"],
            capture_output=True, text=True, env=env, check=True)
        outputs.append(done.stdout)
    assert outputs[0] == outputs[1]
    assert json.loads(outputs[0])["digest"] == json.loads(outputs[1])["digest"]


def test_assemble_text_shows_breakdown_and_history(chat_db: str) -> None:
    result = CliRunner().invoke(app, ["--db", chat_db, "assemble", "chat", "--profile", "card",
                                      "--now", "2026-03-01T12:00:00Z", "--format", "text"])
    assert result.exit_code == 0, result.output
    assert "Example Dialogue" in result.output and "expired @ msg 5" in result.output
    assert "summarized from" in result.output


@pytest.mark.parametrize(("args", "code", "needle"), [
    (["assemble", "nobody"], 1, "unknown session 'nobody'"),
    (["assemble", "chat", "--profile", "poem"], 2, "poem"),
    (["assemble", "chat", "--now", "yesterday"], 1, "ISO-8601"),
    (["assemble", "chat", "--policy", "/nonexistent/p.json"], 1, "cannot read policy file"),
])
def test_assemble_bad_input(chat_db: str, args: list[str], code: int, needle: str) -> None:
    result = CliRunner().invoke(app, ["--db", chat_db, *args])
    assert result.exit_code == code
    assert needle in result.output
    assert "Traceback" not in result.output


def test_assemble_bad_policy_json_is_one_line(chat_db: str, tmp_path: Path) -> None:
    bad = tmp_path / "p.json"
    bad.write_text('{"profile": "card", "compression_level": "extreme"}')
    result = CliRunner().invoke(app, ["--db", chat_db, "assemble", "chat", "--profile", "card",
                                      "--policy", str(bad)])
    assert result.exit_code == 1
    assert "compression_level" in result.output and "Traceback" not in result.output


def test_history_memo_survives_tail_retraction_but_not_prefix_changes(ledger: Ledger) -> None:
    _chat(ledger, 8, level="chat_only")
    ledger.append("chat", {"type": "history.summarized",
                           "data": {"through_message_id": "m3", "summary": "Early talk."}})

    def summarized_from() -> int | None:
        report = ledger.assemble("chat", "card", now=NOW).report
        assert isinstance(report, CardReport)
        return report.chat_history.summarized_from

    def without_memo() -> int | None:
        policy = ledger.assemble("chat", "card", now=NOW).policy_version
        with ledger.engine.begin() as conn:
            conn.exec_driver_sql("DELETE FROM history_token_memo")
        assert ledger.assemble("chat", "card", now=NOW).policy_version == policy
        return summarized_from()

    summarized_from()  # writes the memo
    # Retracting a tail message keeps the memo valid; the figure matches a fresh count.
    ledger.append("chat", {"type": "message.retracted", "data": {"message_id": "m7"}})
    assert summarized_from() == without_memo()
    # Re-using a summarized message's id moves it out of the prefix: the memo must not apply.
    summarized_from()
    ledger.append("chat", {"type": "message.appended", "data": {
        "message_id": "m1", "role": "user", "content": "A much longer replacement line."}})
    assert summarized_from() == without_memo()
