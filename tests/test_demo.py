"""``ctxledger demo`` and the example sessions it loads.

The examples are the fixtures later profiles build on, so their contents are checked
here too: each must hold what its profile will need.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import Any, get_args

import pytest
from typer.testing import CliRunner, Result

from ctxledger import Ledger
from ctxledger._config import ENV_VAR
from ctxledger.cli import app
from ctxledger.cli._errors import DEBUG_ENV_VAR
from ctxledger.io._examples import EXAMPLES_DIR, ExampleEvent, read_example_file, read_examples
from ctxledger.store.catalog import CATALOG, ItemKind
from ctxledger.store.streams import stream_kind


@pytest.fixture
def runner() -> CliRunner:
    """A runner that cannot reach a real ledger through the environment."""
    return CliRunner(env={ENV_VAR: None, DEBUG_ENV_VAR: None, "COLUMNS": "160"})


def _examples() -> list[ExampleEvent]:
    return read_examples(sorted(EXAMPLES_DIR.glob("*.jsonl")))


def _file(name: str) -> list[ExampleEvent]:
    return read_example_file(EXAMPLES_DIR / name)


def _of_type(events: list[ExampleEvent], type_name: str) -> list[dict[str, Any]]:
    return [e.event["data"] for e in events if e.event["type"] == type_name]


def _sessions(events: list[ExampleEvent]) -> list[str]:
    return sorted({e.stream for e in events if stream_kind(e.stream) == "session"})


# -- the demo command ---------------------------------------------------------------------------


def test_demo_prints_every_example_session(runner: CliRunner, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'demo.db'}"
    result = runner.invoke(app, ["demo", "--db", url])
    assert result.exit_code == 0, result.stderr
    examples = _examples()
    for path in EXAMPLES_DIR.glob("*.jsonl"):
        assert f"examples/{path.name}" in result.stdout
    for session in _sessions(examples):
        assert re.search(rf"^state {re.escape(session)}\s*$", result.stdout, re.MULTILINE), \
            session
    assert f"{len(examples)} events in" in result.stdout
    assert re.search(r"result\s+│\s+ok", result.stdout)
    # The novel example with its stats line, and a state scoped to an agent.
    assert re.search(r"^Hot: \d+/15000 tokens \(\d+ items\) \| Warm: .* \| Total: \d+/80000$",
                     result.stdout, re.MULTILINE)
    scoped = re.search(r"state (\S+) --agent executor\b", result.stdout)
    assert scoped is not None
    with Ledger.open(url) as ledger:
        expected = ledger.state(scoped.group(1), agent="executor")
    assert '"_savings": {' in result.stdout
    assert f'"reduction_pct": {expected["_savings"]["reduction_pct"]}' in result.stdout

    with Ledger.open(url) as ledger:
        # The demo's nightly rollup adds rollup.completed events on the stream "system",
        # and it records each example assembly (context.assembled) to audit it.
        stored = [e for e in ledger.events()
                  if e.stream_id != "system" and e.type != "context.assembled"]
    assert len(stored) == len(examples)
    assert "usage of acme-billing, 2025-05-01 .. 2025-05-11" in result.stdout
    # The demo drives the clock: every event is recorded at its example's time, in order.
    assert [(e.stream_id, e.type, e.recorded_at) for e in stored] == \
        [(x.stream, x.event["type"], x.at) for x in examples]


def test_demo_twice_on_one_database_is_idempotent(runner: CliRunner, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'demo.db'}"
    first = runner.invoke(app, ["demo", "--db", url])
    second = runner.invoke(app, ["--db", url, "demo"])  # the global --db works too
    assert (first.exit_code, second.exit_code) == (0, 0), second.stderr
    with Ledger.open(url) as ledger:
        rollups = [e for e in ledger.events("system") if e.type == "rollup.completed"]
        recorded = [e for e in ledger.events() if e.type == "context.assembled"]
        assert ledger.head() == len(_examples()) + len(rollups) + len(recorded)
        assert ledger.audit().ok
    assert len({e.data["day"] for e in rollups}) == len(rollups) > 0  # the second rolled none
    assert "rolled up 0 day(s)" in second.stdout


def test_demo_shows_only_the_examples_of_a_busy_database(runner: CliRunner,
                                                        tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'busy.db'}"
    with Ledger.open(url) as ledger:
        ledger.append("unrelated-chat", {"type": "session.started", "data": {}})
    result = runner.invoke(app, ["demo", "--db", url])
    assert result.exit_code == 0, result.stderr
    assert "unrelated-chat" not in result.stdout
    examples = _examples()
    assert f"{len(examples)} events in" in result.stdout
    assert f"head position {len(examples) + 1}" in result.stdout


def test_demo_defaults_to_a_temporary_database(runner: CliRunner, tmp_path: Path) -> None:
    result = runner.invoke(app, ["demo"], env={ENV_VAR: f"sqlite:///{tmp_path / 'real.db'}"})
    assert result.exit_code == 0, result.stderr
    assert "temporary" in result.stdout
    assert not (tmp_path / "real.db").exists()  # $CTXLEDGER_DB is never written by the demo


def _demo_with(runner: CliRunner, tmp_path: Path, files: dict[str, str]) -> Result:
    folder = tmp_path / "examples"
    folder.mkdir()
    for name, text in files.items():
        (folder / name).write_text(text, encoding="utf-8")
    return runner.invoke(app, ["demo", "--db", f"sqlite:///{tmp_path / 'd.db'}",
                               "--examples", str(folder)])


_GOOD = ('{"stream": "s-1", "at": "2025-01-01T10:00:00Z", "type": "session.started",'
         ' "data": {"scope": "x"}}\n')


@pytest.mark.parametrize(("files", "needle"), [
    pytest.param({}, "no example files", id="empty-folder"),
    pytest.param({"a.jsonl": _GOOD + "{broken\n"}, "a.jsonl line 2: invalid JSON",
                 id="broken-json"),
    pytest.param({"a.jsonl": _GOOD + _GOOD.replace("10:00", "09:00")},
                 "a.jsonl line 2: 'at' goes back in time", id="time-goes-back"),
    pytest.param({"a.jsonl": _GOOD.replace("Z", "")}, "a.jsonl line 1: 'at' needs a zone",
                 id="naive-time"),
    pytest.param({"a.jsonl": _GOOD + _GOOD.replace("session.started", "session.paused")},
                 "a.jsonl line 2: unknown event type 'session.paused'", id="unknown-type"),
    pytest.param({"a.jsonl": _GOOD.replace('"stream"', '"streem"')},
                 "a.jsonl line 1: unknown key(s): streem", id="unknown-key"),
])
def test_bad_examples_are_one_line_errors(runner: CliRunner, tmp_path: Path,
                                          files: dict[str, str], needle: str) -> None:
    result = _demo_with(runner, tmp_path, files)
    assert result.exit_code == 1, result.stdout
    assert result.stderr.splitlines() == [result.stderr.strip()]
    assert result.stderr.startswith("error: ") and needle in result.stderr
    assert "Traceback" not in result.stderr


def test_examples_of_all_files_are_appended_in_time_order(runner: CliRunner,
                                                          tmp_path: Path) -> None:
    late = _GOOD.replace("s-1", "s-late").replace("10:00", "12:00")
    early = _GOOD.replace("s-1", "s-early").replace("10:00", "08:00")
    result = _demo_with(runner, tmp_path, {"a.jsonl": late, "b.jsonl": early})
    assert result.exit_code == 0, result.stderr
    with Ledger.open(f"sqlite:///{tmp_path / 'd.db'}") as ledger:
        assert [e.stream_id for e in ledger.events()] == ["s-early", "s-late"]


# -- what each example holds (later profiles rely on it) ----------------------------------------


def test_every_example_line_is_readable_json_with_the_documented_keys() -> None:
    for path in sorted(EXAMPLES_DIR.glob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            raw = json.loads(line)
            # A card.set may name a card file (examples/cards) instead of its data.
            given = "card_file" if "card_file" in raw else "data"
            assert given == "data" or raw["type"] == "card.set"
            assert {"stream", "at", "type", given} <= set(raw) <= {
                "stream", "at", "type", given, "id", "metadata"}
            assert raw["type"] in CATALOG


def test_card_example() -> None:
    events = _file("card.jsonl")
    (card,) = _of_type(events, "card.set")
    v2_fields = {"name", "description", "personality", "scenario", "first_mes", "mes_example",
                 "system_prompt", "post_history_instructions"}
    assert v2_fields <= set(card) and all(card[f] for f in v2_fields)
    levels = [(e.stream, e.event["data"]["value"]) for e in events
              if e.event["type"] == "setting.changed"
              and e.event["data"]["key"] == "compression_level"]
    assert {stream_kind(stream) for stream, _ in levels} == {"scope", "session"}
    messages = _of_type(events, "message.appended")
    (retracted,) = _of_type(events, "message.retracted")
    assert retracted["message_id"] in {m["message_id"] for m in messages}
    assert len(messages) - 1 >= 12
    (summary,) = _of_type(events, "history.summarized")
    assert summary["through_message_id"] in {m["message_id"] for m in messages}


def test_session_example() -> None:
    events = _file("session.jsonl")
    tools = _of_type(events, "tool.registered")
    assert len(tools) >= 12
    kinds = Counter(t["tool_type"] for t in tools)
    assert kinds["builtin"] >= 1 and kinds["mcp_server"] >= 1 and kinds["mcp_tool"] >= 2
    servers = {t["server_name"] for t in tools if t["tool_type"] == "mcp_server"}
    for tool in (t for t in tools if t["tool_type"] == "mcp_tool"):
        match = re.match(r"^mcp__([^_]+(?:_[^_]+)*)__", tool["name"])
        assert match is not None and match.group(1) in servers
    uses = [e.at for e in events if e.event["type"] == "tool.used"]
    assert (max(uses) - min(uses)).days >= 10
    observations = {o["kind"] for o in _of_type(events, "observation.recorded")}
    assert observations == {"change", "decision", "finding", "reference"}
    ended = [e for e in events if e.event["type"] == "session.ended"]
    assert ended and ended[-1].event["data"]["summary"]
    current = events[-1].stream
    assert current not in {e.stream for e in ended}
    assert {stream_kind(e.stream) for e in events} == {"scope", "session"}


def test_novel_example() -> None:
    events = _file("novel.jsonl")
    assert _of_type(events, "chapter.moved")
    assert {i["kind"] for i in _of_type(events, "item.put")} == set(get_args(ItemKind))


def test_brief_example() -> None:
    events = _file("brief.jsonl")
    sources = {(s["source_id"], s["version"]) for s in _of_type(events, "source.registered")}
    snippets = _of_type(events, "snippet.added")
    assert sources and snippets and all(s["entities"] for s in snippets)
    entities = {e["entity_id"] for e in _of_type(events, "entity.put")}
    assert {name for s in snippets for name in s["entities"]} <= entities
    personas = _of_type(events, "persona.set")
    assert personas and all(persona["knowledge_scope"] for persona in personas)
    assert _of_type(events, "message.appended")
    # Provenance cases for later: at least one snippet cites an unregistered version.
    assert any((s["source_id"], s["source_version"]) not in sources for s in snippets)


def test_tools_example() -> None:
    """A user asks, the assistant calls two tools in one message, both answers come back
    with their call's id, and the assistant answers; the session names its profile."""
    events = _file("tools.jsonl")
    (profile,) = [s for s in _of_type(events, "setting.changed") if s["key"] == "profile"]
    assert profile["value"] == "card"
    roles = [m["role"] for m in _of_type(events, "message.appended")]
    assert roles == ["user", "assistant", "tool", "tool", "assistant"]
    user, calls, *answers, reply = _of_type(events, "message.appended")
    assert user["name"] and user["content"]
    assert calls["content"] is None
    names = [call["function"]["name"] for call in calls["tool_calls"]]
    assert names == ["get_weather", "get_time"]
    assert [a["tool_call_id"] for a in answers] == [c["id"] for c in calls["tool_calls"]]
    assert reply["content"] and not reply.get("tool_calls")
    used = [u["tool_name"] for u in _of_type(events, "tool.used")]
    assert used == names
    # After the examples before it, so their log positions stay as they were.
    others = [e for e in _examples() if e.file not in ("tools.jsonl", "lorebook.jsonl")]
    assert min(e.at for e in events) > max(e.at for e in others)


def test_lorebook_example() -> None:
    """A SillyTavern-style chat: the card comes from the V2 PNG in examples/cards (with
    its lorebook), the greeting is stored as message 1, and the example comes last."""
    events = _file("lorebook.jsonl")
    (card,) = _of_type(events, "card.set")
    # As written in the PNG's chara chunk: the same card as the JSON beside it.
    assert card == json.loads((EXAMPLES_DIR / "cards" / "wren-halloway.json").read_text())
    assert card["spec"] == "chara_card_v2"
    assert len(card["data"]["character_book"]["entries"]) == 6
    first = _of_type(events, "message.appended")[0]
    assert first["role"] == "assistant" and first["content"].startswith("*A bell")
    others = [e for e in _examples() if e.file != "lorebook.jsonl"]
    assert min(e.at for e in events) > max(e.at for e in others)


def test_demo_shows_the_activated_lorebook_entries(runner: CliRunner, tmp_path: Path) -> None:
    result = runner.invoke(app, ["demo", "--db", f"sqlite:///{tmp_path / 'demo.db'}"])
    assert result.exit_code == 0, result.stderr
    table = result.stdout[result.stdout.index("assemble rp-lowmere-001 --profile card"):]
    for row in ("lore: Lowmere", "activated: 'canal' in u1 (before_char)",
                "activated: 'watch' in u1 (after_char)", "activated: constant (before_char)",
                "activated: 'tired' in u2 (depth 2)", "disabled", "not matched",
                "sent as message 1"):
        assert row in table, row


def test_demo_prints_the_tool_chat_in_openai_shape(runner: CliRunner, tmp_path: Path) -> None:
    result = runner.invoke(app, ["demo", "--db", f"sqlite:///{tmp_path / 'demo.db'}"])
    assert result.exit_code == 0, result.stderr
    start = result.stdout.index("assemble trip-lisbon-001 --format openai")
    block = result.stdout[start:].split("\n", 1)[1]
    shown = json.loads(block[: block.index("\n───")])
    with Ledger.open(f"sqlite:///{tmp_path / 'demo.db'}") as ledger:
        last = read_example_file(EXAMPLES_DIR / "tools.jsonl")[-1].at
        assert shown == ledger.assemble("trip-lisbon-001", "card", now=last).to_openai()
