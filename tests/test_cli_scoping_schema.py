"""CLI: ``state --agent``, ``assemble --agent``, ``schema``, and the
``novel`` profile end to end."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import jsonschema
import pytest
from typer.testing import CliRunner, Result

from ctxledger import Ledger
from ctxledger._config import ENV_VAR
from ctxledger._demo import load_and_assemble_examples
from ctxledger.assembler.profiles import profile_names
from ctxledger.cli import app
from ctxledger.cli._errors import DEBUG_ENV_VAR

Run = Callable[..., Result]


def _jsonl(*events: dict[str, Any]) -> str:
    return "".join(json.dumps(e) + "\n" for e in events)


@pytest.fixture
def cli(sqlite_url: str) -> Run:
    runner = CliRunner(env={ENV_VAR: None, DEBUG_ENV_VAR: None, "COLUMNS": "160"})

    def run(*args: str, input: str | None = None) -> Result:
        return runner.invoke(app, ["--db", sqlite_url, *args], input=input)
    return run


def _session(cli: Run) -> None:
    result = cli("append", "s1", input=_jsonl(
        {"type": "session.started", "data": {"scope": "p", "title": "T"}},
        {"type": "message.appended", "data": {"role": "user", "content": "hi"}},
        {"type": "document.put", "data": {"doc_id": "plan", "kind": "plan_state",
                                          "content": "Phase: 3 of 5\nStatus: Going"}}))
    assert result.exit_code == 0, result.stderr


def test_state_with_an_agent(cli: Run, sqlite_url: str) -> None:
    _session(cli)
    result = cli("state", "s1", "--agent", "verifier", "--now", "2031-01-01T00:00:00Z")
    assert result.exit_code == 0, result.stderr
    found = json.loads(result.stdout)
    assert found["_agent"] == "verifier"
    assert set(found) == {"_agent", "_savings", "scope", "chapter", "title", "documents",
                          "settings"}
    assert found["documents"][0]["content"]["phase"] == "3"
    with Ledger.open(sqlite_url) as ledger:
        assert found == ledger.state("s1", agent="verifier")
    text = cli("state", "s1", "--agent", "verifier", "--format", "text")
    assert text.exit_code == 0 and "_savings" in text.stdout
    named = cli("state", "s1", "--agent=gsd-verifier", "--now", "2031-01-01T00:00:00Z")
    assert named.exit_code == 0, named.stderr
    assert json.loads(named.stdout) == {**found, "_agent": "gsd-verifier"}
    unknown = cli("state", "s1", "--agent", "stranger")
    assert unknown.exit_code == 0, unknown.stderr
    stranger = json.loads(unknown.stdout)
    assert stranger["_agent"] == "stranger" and "no manifest" in stranger["_warning"]
    assert "_savings" not in stranger and "messages" in stranger
    assert isinstance(found["_savings"]["reduction_pct"], float)


def test_empty_agent_is_a_usage_error(cli: Run) -> None:
    _session(cli)
    assert cli("state", "s1", "--agent", " ").exit_code == 2


def test_invalid_manifest_setting_is_one_error_line_and_writes_nothing(cli: Run) -> None:
    _session(cli)
    result = cli("append", "scope:p", input=_jsonl(
        {"type": "setting.changed", "data": {"key": "theme", "value": "dark"}},
        {"type": "setting.changed", "data": {"key": "agent_manifests",
                                             "value": {"critic": {"optional": ["nope"]}}}}))
    assert result.exit_code == 1
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: line 2: setting.changed: ")
    assert "agent_manifests" in lines[0] and "nope" in lines[0]
    assert len(cli("events").stdout.splitlines()) == 3


@pytest.mark.parametrize("profile", ["card", "session", "novel"])
def test_assemble_with_an_agent_adds_the_scoped_state(cli: Run, profile: str) -> None:
    _session(cli)
    now = "2031-01-01T00:00:00Z"
    result = cli("assemble", "s1", "--profile", profile, "--agent", "executor", "--now", now)
    assert result.exit_code == 0, result.stderr
    found = json.loads(result.stdout)
    plain = json.loads(cli("assemble", "s1", "--profile", profile, "--now", now).stdout)
    # The assembly is untouched; the agent's part is beside it.
    assert {key: value for key, value in found.items() if key != "agent"} == plain
    state = cli("state", "s1", "--agent", "executor", "--now", now)
    assert found["agent"]["state"] == json.loads(state.stdout)
    assert found["agent"]["name"] == "executor"
    text = found["agent"]["text"]
    assert text.startswith(plain["text"] + "\n\n[ctxledger - Agent state: executor]\n")
    assert json.loads(text.rsplit("\n", 1)[1]) == found["agent"]["state"]


@pytest.mark.parametrize("format", ["openai", "anthropic"])
def test_assemble_with_an_agent_refuses_the_chat_formats(cli: Run, format: str) -> None:
    _session(cli)
    result = cli("assemble", "s1", "--profile", "card", "--agent", "executor",
                 "--format", format)
    assert result.exit_code == 2
    assert "comes with --format json or text" in result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""


def test_assemble_novel_json_and_text(cli: Run) -> None:
    result = cli("append", "book", input=_jsonl(
        {"type": "session.started", "data": {"scope": "b"}},
        {"type": "chapter.moved", "data": {"chapter": 3}},
        {"type": "item.put", "data": {"item_id": "plan", "kind": "scene_plan",
                                      "content": "A scene."}},
        {"type": "item.put", "data": {"item_id": "s2", "kind": "summary",
                                      "content": "Ch. 2.", "chapter": 2}}))
    assert result.exit_code == 0, result.stderr
    found = cli("assemble", "book", "--profile", "novel", "--now", "2031-01-01T00:00:00Z")
    assert found.exit_code == 0, found.stderr
    assembly = json.loads(found.stdout)
    assert assembly["report"]["stats"].startswith("Hot: ")
    # Per-tier totals (with their framing) and budgets; they add up to the total.
    tiers = {tier["tier"]: tier for tier in assembly["report"]["tiers"]}
    assert {name: tier["budget"] for name, tier in tiers.items()} == {
        "hot": 15000, "warm": 25000, "cold": 40000}
    assert {name: tier["tokens"] for name, tier in tiers.items() if tier["items"]} == \
        assembly["tokens"]["tiers"]
    # The whole goes out as one message: its wrapper and the reply priming are framing.
    assert sum(tier["tokens"] for tier in tiers.values()) + assembly["tokens"]["framing"] \
        == assembly["tokens"]["total"]
    assert assembly["tokens"]["framing"] == 3 + 1 + 3  # per message, "system", priming
    text = cli("assemble", "book", "--profile", "novel", "--format", "text")
    assert text.exit_code == 0, text.stderr
    lines = text.stdout.splitlines()
    # A table per tier, each with the columns item, kind, priority, tokens, action.
    for tier in ("hot", "warm", "cold"):
        assert any(line.startswith(f"{tier}: ") for line in lines), tier
    headers = [line for line in lines if "item" in line and "action" in line]
    assert len(headers) == 3
    for header in headers:
        words = header.replace("┃", " ").replace("|", " ").split()
        assert words == ["item", "kind", "priority", "tokens", "action"]
    assert "included (prefix)" in text.stdout and "scene_plan" in text.stdout
    assert assembly["report"]["stats"] in lines


def test_schema_assembly_covers_every_registered_report(cli: Run) -> None:
    result = cli("schema")
    assert result.exit_code == 0, result.stderr
    schema = json.loads(result.stdout)
    assert json.loads(cli("schema", "assembly").stdout) == schema
    jsonschema.Draft202012Validator.check_schema(schema)
    report = schema["properties"]["report"]
    assert report["discriminator"]["propertyName"] == "profile"
    assert sorted(report["discriminator"]["mapping"]) == profile_names()
    # Every example assembly (one per profile with an example) validates against it.
    found = load_and_assemble_examples("sqlite://")
    assert {"card.jsonl", "novel.jsonl", "session.jsonl"} <= set(found)
    validator = jsonschema.Draft202012Validator(schema)
    for _, assembly in found.values():
        validator.validate(json.loads(assembly.model_dump_json()))
    # A report of one profile under another's name does not validate.
    _, card = found["card.jsonl"]
    wrong = json.loads(card.model_dump_json())
    wrong["report"]["profile"] = "novel"
    assert not validator.is_valid(wrong)


def test_schema_events_accepts_catalog_events(cli: Run) -> None:
    schema = json.loads(cli("schema", "events").stdout)
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    validator.validate({"type": "item.put", "data": {"item_id": "a", "kind": "plot",
                                                     "content": "x"}})
    assert not validator.is_valid({"type": "item.put", "data": {"item_id": "a",
                                                                "kind": "poem",
                                                                "content": "x"}})
    assert not validator.is_valid({"type": "no.such", "data": {}})


def test_schema_of_an_unknown_kind_is_a_usage_error(cli: Run) -> None:
    assert cli("schema", "tables").exit_code == 2
