"""``assemble --format openai|anthropic``: the context's messages as each chat API takes
them, shown on the tool-calling example (``examples/tools.jsonl``) on both backends."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import pytest
from helpers.assertions import one_error_line
from helpers.chat_shapes import valid_anthropic, valid_openai
from typer.testing import CliRunner

from ctxledger import Ledger
from ctxledger._config import ENV_VAR
from ctxledger.cli import app
from ctxledger.cli._errors import DEBUG_ENV_VAR
from ctxledger.io._examples import EXAMPLES_DIR, ScriptedClock, load_examples, read_example_file
from ctxledger.store.clock import format_utc

SESSION = "trip-lisbon-001"


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner(env={ENV_VAR: None, DEBUG_ENV_VAR: None, "COLUMNS": "160"})


@pytest.fixture
def tools_example(db_url: str) -> str:
    """The example's events loaded at their own times; returns its last time."""
    examples = read_example_file(EXAMPLES_DIR / "tools.jsonl")
    clock = ScriptedClock(examples[0].at)
    with Ledger.open(db_url, clock=clock) as ledger:
        load_examples(ledger, clock, examples)
    return format_utc(examples[-1].at)


def _assemble(runner: CliRunner, url: str, now: str, chat_format: str) -> Any:
    result = runner.invoke(app, ["assemble", SESSION, "--now", now, "--format", chat_format,
                                 "--db", url])
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def test_the_formats_print_what_the_converters_give(runner: CliRunner, db_url: str,
                                                    tools_example: str) -> None:
    with Ledger.open(db_url) as ledger:
        assembly = ledger.assemble(SESSION, "card", now=datetime.fromisoformat(tools_example))
    assert _assemble(runner, db_url, tools_example, "openai") == assembly.to_openai()
    assert _assemble(runner, db_url, tools_example, "anthropic") == assembly.to_anthropic()
    whole = _assemble(runner, db_url, tools_example, "json")
    assert whole["digest"] == assembly.digest


def test_the_tool_chat_in_openai_shape(runner: CliRunner, db_url: str,
                                       tools_example: str) -> None:
    out = _assemble(runner, db_url, tools_example, "openai")
    valid_openai(out)
    assert [message["role"] for message in out] == ["system", "user", "assistant", "tool",
                                                    "tool", "assistant"]
    system, user, calls, weather, time, answer = out
    assert "Call get_weather and get_time" in system["content"]
    assert (user["name"], user["content"]) == ("nadia", "I land in Lisbon tonight. What's "
                                               "the weather there right now, and what time "
                                               "is it?")
    assert calls["content"] is None
    assert [(c["id"], c["function"]["name"], json.loads(c["function"]["arguments"]))
            for c in calls["tool_calls"]] == [
        ("call_weather_1", "get_weather", {"city": "Lisbon", "unit": "celsius"}),
        ("call_time_1", "get_time", {"timezone": "Europe/Lisbon"})]
    assert (weather["tool_call_id"], time["tool_call_id"]) == ("call_weather_1",
                                                               "call_time_1")
    assert json.loads(weather["content"])["temperature"] == 19
    assert answer["content"].startswith("It's 10:01 in Lisbon")


def test_the_tool_chat_in_anthropic_shape(runner: CliRunner, db_url: str,
                                          tools_example: str) -> None:
    out = _assemble(runner, db_url, tools_example, "anthropic")
    valid_anthropic(out)
    assert list(out) == ["system", "messages"]
    assert [message["role"] for message in out["messages"]] == ["user", "assistant", "user",
                                                                "assistant"]
    calls, results = out["messages"][1]["content"], out["messages"][2]["content"]
    assert [(b["type"], b["id"], b["input"]) for b in calls] == [
        ("tool_use", "call_weather_1", {"city": "Lisbon", "unit": "celsius"}),
        ("tool_use", "call_time_1", {"timezone": "Europe/Lisbon"})]
    assert [(b["type"], b["tool_use_id"]) for b in results] == [
        ("tool_result", "call_weather_1"), ("tool_result", "call_time_1")]


def test_media_the_format_cannot_send_is_one_error_line(runner: CliRunner,
                                                         db_url: str) -> None:
    digest = "ab" * 32
    with Ledger.open(db_url) as ledger:
        ledger.append("shots", [
            {"type": "session.started", "data": {"scope": "u"}},
            {"type": "message.appended", "data": {"role": "user", "content": [
                {"type": "text", "text": "What is in this photo?"},
                {"type": "image", "media_type": "image/png", "sha256": digest}]}}])
    now = "2026-01-01T00:00:00Z"
    ok = runner.invoke(app, ["assemble", "shots", "--profile", "card", "--now", now,
                             "--db", db_url])
    assert ok.exit_code == 0, ok.stderr
    for chat_format in ("openai", "anthropic"):
        result = runner.invoke(app, ["assemble", "shots", "--profile", "card", "--now", now,
                                     "--format", chat_format, "--db", db_url])
        one_error_line(result, f"sha256:{digest[:12]} is held by its hash only",
                       "resolve_media")


def test_an_unknown_format_is_a_usage_error(runner: CliRunner, db_url: str,
                                            tools_example: str) -> None:
    result = runner.invoke(app, ["assemble", SESSION, "--format", "gemini", "--db", db_url])
    assert result.exit_code == 2
    assert "openai" in result.stderr and "anthropic" in result.stderr
