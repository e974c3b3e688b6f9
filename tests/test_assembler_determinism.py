"""Determinism: the same input gives byte-identical output, in any process and hash seed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from ctxledger.assembler import Assembly, assemble
from ctxledger.assembler.digest import canonical_payload, compute_digest

ROOT = Path(__file__).resolve().parents[1]
NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)

# Builds one card view and one session view from plain data; also run in subprocesses.
BUILD = '''
from datetime import UTC, datetime, timedelta
from ctxledger.projections.session_view import *

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def card_view(settings, card):
    messages = tuple(
        Message(seq=i + 2, message_id=f"m{i}", role=("user", "assistant")[i % 2], name=None,
                content=f"line {i} " + "words " * (i % 5), position=10 + i,
                recorded_at=NOW - timedelta(minutes=30 - i))
        for i in range(12))
    summary = HistorySummary(summary="They met at the docks.", through_message_id="m5",
                             through_seq=7, position=40)
    history = History(summary=summary, messages=messages[6:], complete=False,
                      summarized_count=6, summarized_messages=messages[:6])
    return SessionView(stream_id="chat", scope="s", position=60, exists=True,
                       counts=MessageCounts(user=6, assistant=6, total=12),
                       settings=settings, card=card, history=history)


def session_view(settings):
    def used(days):
        return NOW - timedelta(days=days)
    tools = (Tool("/deploy", "slash_command", None, None, 1),
             Tool("github", "mcp_server", "github", None, 2),
             Tool("mcp__github__pr", "mcp_tool", "github", None, 3),
             Tool("notes", "skill", None, "Write notes", 4))
    usage = (ToolUsage("/deploy", None, 3, used(1.5), 7, used(1.5)),
             ToolUsage("mcp__github__pr", None, 2, used(0.25), 2, used(0.25)),
             ToolUsage("notes", None, 1, used(6.5), 4, used(6.5)))
    observations = tuple(
        Observation(kind, f"{kind} {i}: something happened", None,
                    NOW - timedelta(hours=5 * i + 1), i, "prev")
        for i, kind in enumerate(["change", "finding", "decision", "reference", "change"]))
    previous = PreviousSession("prev", "Refactored the parser.", NOW - timedelta(hours=2), 30)
    return SessionView(stream_id="sess", scope="s", position=99, exists=True,
                       settings=settings, tools=tools, tool_usage=usage,
                       usage_window=(NOW - timedelta(days=7), NOW),
                       observations=observations, previous_session=previous)


SETTINGS_A = {"compression_level": "chat_dialogue", "user_name": "Ana", "context_limit": 500}
SETTINGS_B = dict(reversed(list(SETTINGS_A.items())))
CARD_A = {"name": "Bo", "description": "{{char}} is a sailor.", "personality": "calm",
          "scenario": "At sea.", "mes_example": "{{user}}: hi", "first_mes": "Ahoy",
          "system_prompt": "Play {{char}}."}
CARD_B = dict(sorted(CARD_A.items(), reverse=True))
'''

namespace: dict[str, Any] = {}
exec(BUILD, namespace)  # the same source the subprocesses run


def card_assembly(settings: dict[str, Any], card: dict[str, Any]) -> Assembly:
    return assemble(namespace["card_view"](settings, card), "card", NOW)


def session_assembly(settings: dict[str, Any]) -> Assembly:
    return assemble(namespace["session_view"](settings), "session", NOW)


def test_assembling_twice_is_byte_identical() -> None:
    for make in (lambda: card_assembly(namespace["SETTINGS_A"], namespace["CARD_A"]),
                 lambda: session_assembly({})):
        first, second = make(), make()
        assert first.model_dump_json() == second.model_dump_json()
        assert first.digest == second.digest == compute_digest(first)
        assert len(first.digest) == 64


def test_insertion_order_of_mappings_does_not_matter() -> None:
    a = card_assembly(namespace["SETTINGS_A"], namespace["CARD_A"])
    b = card_assembly(namespace["SETTINGS_B"], namespace["CARD_B"])
    assert a.digest == b.digest
    assert a.model_dump_json() == b.model_dump_json()
    s1 = session_assembly({"usage_window_days": 7, "observation_limit": 20})
    s2 = session_assembly({"observation_limit": 20, "usage_window_days": 7})
    assert s1.digest == s2.digest


def test_any_process_and_hash_seed_gives_the_same_output() -> None:
    script = BUILD + '''
import json
from ctxledger.assembler import assemble
card = assemble(card_view(SETTINGS_A, CARD_A), "card", NOW)
session = assemble(session_view({}), "session", NOW)
print(json.dumps([card.digest, session.digest, card.model_dump_json(),
                  session.model_dump_json()]))
'''
    results = []
    for seed in ("0", "12345", "random"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env,
                              capture_output=True, text=True, check=True, timeout=120)
        results.append(json.loads(done.stdout))
    here = [card_assembly(namespace["SETTINGS_A"], namespace["CARD_A"]),
            session_assembly({})]
    assert results[0] == results[1] == results[2]
    assert results[0][:2] == [here[0].digest, here[1].digest]
    assert results[0][2:] == [here[0].model_dump_json(), here[1].model_dump_json()]


def test_digest_covers_the_output_but_not_the_counting_method() -> None:
    assembly = session_assembly({})
    relabeled = assembly.model_copy(update={"tokens": assembly.tokens.model_copy(
        update={"methods": ["tiktoken:cl100k_base", "something-else"]})})
    assert compute_digest(relabeled) == assembly.digest
    assert "methods" not in json.loads(canonical_payload(assembly))["tokens"]
    later = assemble(namespace["session_view"]({}), "session", NOW)
    assert later.digest == assembly.digest
    card = card_assembly(namespace["SETTINGS_A"], namespace["CARD_A"])
    moved = assemble(namespace["card_view"](namespace["SETTINGS_A"], namespace["CARD_A"]), "card",
                     NOW + timedelta(seconds=1))
    assert moved.text == card.text and moved.digest != card.digest


def test_assemblies_round_trip_through_json() -> None:
    for assembly in (card_assembly(namespace["SETTINGS_A"], namespace["CARD_A"]),
                     session_assembly({})):
        again = Assembly.model_validate_json(assembly.model_dump_json())
        assert again == assembly
        assert compute_digest(again) == assembly.digest


def test_now_in_another_timezone_is_the_same_instant() -> None:
    from datetime import timezone

    plus_two = NOW.astimezone(timezone(timedelta(hours=2)))
    a = assemble(namespace["session_view"]({}), "session", NOW)
    b = assemble(namespace["session_view"]({}), "session", plus_two)
    assert a.digest == b.digest and b.now.utcoffset() == timedelta(0)
