"""Chat messages in: OpenAI's and Anthropic's shapes are stored in the canonical form
(``store.chat_shapes``), one conversation in either shape is stored alike, refused shapes
are one line and write nothing, ``Ledger.append_messages`` is atomic, and
``ctxledger append-messages`` reads a file or stdin. Every test runs on SQLite and
PostgreSQL; inputs are built with the real ``openai``/``anthropic`` SDK types where an app
would get them from the SDK."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from anthropic.types import TextBlock, ToolUseBlock
from helpers.assertions import ledger_state, one_error_line, one_line
from openai.types.chat import ChatCompletionMessage
from typer.testing import CliRunner

from ctxledger import Ledger
from ctxledger.cli import app
from ctxledger.projections.session_view import ViewRequest
from ctxledger.render._common import event_summary
from ctxledger.store.errors import EventValidationError, LedgerError

PNG = "iVBORw0KGgo="  # base64 of a PNG signature
PDF = "JVBERi0xLjQ="  # base64 of "%PDF-1.4"


def appended(ledger: Ledger, session: str, data: dict[str, Any]) -> dict[str, Any]:
    """Append one message.appended and return its stored data."""
    ledger.append(session, {"type": "message.appended", "data": data})
    return ledger.events(session)[-1].data


# (what the app sends, what is stored)
ACCEPTED: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("openai-image_url",
     {"role": "user", "content": [{"type": "text", "text": "What is this?"},
                                  {"type": "image_url", "image_url": {
                                      "url": "https://example.com/a.png", "detail": "low"}}]},
     {"role": "user", "content": [{"type": "text", "text": "What is this?"},
                                  {"type": "image", "url": "https://example.com/a.png",
                                   "detail": "low"}]}),
    ("openai-file-id",
     {"role": "user", "content": [{"type": "file", "file": {"file_id": "file-abc"}}]},
     {"role": "user", "content": [{"type": "file", "file_id": "file-abc"}]}),
    ("openai-file-data-url",
     {"role": "user", "content": [{"type": "file", "file": {
         "file_data": f"data:application/pdf;base64,{PDF}", "filename": "a.pdf"}}]},
     {"role": "user", "content": [{"type": "file", "url": f"data:application/pdf;base64,{PDF}",
                                   "filename": "a.pdf"}]}),
    ("openai-file-bare-base64",
     {"role": "user", "content": [{"type": "file", "file": {"file_data": PDF,
                                                            "filename": "report.pdf"}}]},
     {"role": "user", "content": [{"type": "file", "url": f"data:application/pdf;base64,{PDF}",
                                   "filename": "report.pdf"}]}),
    ("openai-sdk-assistant-dump",
     ChatCompletionMessage(role="assistant", content=None, tool_calls=[
         {"id": "call_1", "type": "function",
          "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'}}]).model_dump(),
     {"role": "assistant", "content": None, "tool_calls": [
         {"id": "call_1", "type": "function",
          "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'}}]}),
    ("openai-sdk-plain-answer-dump",
     ChatCompletionMessage(role="assistant", content="Hello!").model_dump(),
     {"role": "assistant", "content": "Hello!"}),
    ("anthropic-image-base64",
     {"role": "user", "content": [{"type": "image", "source": {
         "type": "base64", "media_type": "image/png", "data": PNG}}]},
     {"role": "user", "content": [{"type": "image", "url": f"data:image/png;base64,{PNG}"}]}),
    ("anthropic-image-url",
     {"role": "user", "content": [{"type": "image", "source": {
         "type": "url", "url": "https://example.com/b.jpg"}}]},
     {"role": "user", "content": [{"type": "image", "url": "https://example.com/b.jpg"}]}),
    ("anthropic-image-file",
     {"role": "user", "content": [{"type": "image", "source": {"type": "file",
                                                               "file_id": "file_01"}}]},
     {"role": "user", "content": [{"type": "image", "file_id": "file_01"}]}),
    ("anthropic-document-pdf",
     {"role": "user", "content": [{"type": "document", "title": "Q3 report", "source": {
         "type": "base64", "media_type": "application/pdf", "data": PDF}}]},
     {"role": "user", "content": [{"type": "file", "url": f"data:application/pdf;base64,{PDF}",
                                   "filename": "Q3 report"}]}),
    ("anthropic-document-text",
     {"role": "user", "content": [{"type": "document", "source": {
         "type": "text", "media_type": "text/plain", "data": "héllo"}}]},
     {"role": "user", "content": [{"type": "file",
                                   "url": "data:text/plain;base64,aMOpbGxv"}]}),
    ("anthropic-sdk-tool_use",
     {"role": "assistant", "message_id": "a1", "content": [
         TextBlock(type="text", text="Let me check.").model_dump(),
         ToolUseBlock(type="tool_use", id="toolu_1", name="get_weather",
                      input={"unit": "C", "city": "Paris"}).model_dump()]},
     {"message_id": "a1", "role": "assistant", "content": "Let me check.", "tool_calls": [
         {"id": "toolu_1", "type": "function",
          "function": {"name": "get_weather", "arguments": '{"unit":"C","city":"Paris"}'}}]}),
    ("anthropic-tool_use-only",
     {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_2", "name": "now",
                                        "input": {}}]},
     {"role": "assistant", "content": None, "tool_calls": [
         {"id": "toolu_2", "type": "function", "function": {"name": "now", "arguments": "{}"}}]}),
    ("anthropic-tool_result",
     {"role": "user", "message_id": "r1", "content": [
         {"type": "tool_result", "tool_use_id": "toolu_1", "content": "12C"}]},
     {"message_id": "r1", "role": "tool", "content": "12C", "tool_call_id": "toolu_1"}),
    ("anthropic-tool_result-error-parts",
     {"role": "user", "content": [
         {"type": "tool_result", "tool_use_id": "toolu_1", "is_error": True,
          "content": [{"type": "text", "text": "timeout"},
                      {"type": "image", "source": {"type": "url",
                                                   "url": "https://example.com/s.png"}}]}]},
     {"role": "tool", "tool_call_id": "toolu_1", "is_error": True,
      "content": [{"type": "text", "text": "timeout"},
                  {"type": "image", "url": "https://example.com/s.png"}]}),
    ("anthropic-tool_result-empty",
     {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                   "is_error": False}]},
     {"role": "tool", "tool_call_id": "toolu_1", "content": ""}),
]

CANONICAL: list[dict[str, Any]] = [
    {"role": "user", "content": "plain"},
    {"role": "developer", "content": "Answer in French.", "name": "ops"},
    {"message_id": "m1", "role": "user", "content": [
        {"type": "text", "text": "see"}, {"type": "image", "url": "https://x/a.png"},
        {"type": "image", "media_type": "image/png", "sha256": "ab" * 32},
        {"type": "file", "file_id": "file-1", "filename": "a.pdf"}]},
    {"role": "assistant", "content": [{"type": "text", "text": "one"}], "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}]},
    {"role": "tool", "content": "done", "tool_call_id": "c1", "is_error": False},
]


def test_every_accepted_shape_is_stored_canonically(ledger: Ledger) -> None:
    stored = {name: appended(ledger, "s1", sent) for name, sent, _ in ACCEPTED}
    assert stored == {name: expected for name, _, expected in ACCEPTED}
    # Stored data is canonical: appending it again stores it unchanged.
    for name, data in stored.items():
        assert appended(ledger, "s2", data) == data, name


def test_canonical_input_passes_through_unchanged(ledger: Ledger) -> None:
    for message in CANONICAL:
        assert appended(ledger, "s1", message) == message


# One conversation, as an OpenAI app and as an Anthropic app would send it.
OPENAI_CONVERSATION: list[dict[str, Any]] = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": [
        {"type": "text", "text": "Weather in Paris? Here is the map."},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}}]},
    ChatCompletionMessage(role="assistant", content="Let me check.", tool_calls=[
        {"id": "toolu_1", "type": "function",
         "function": {"name": "get_weather", "arguments": '{"city":"Paris","unit":"C"}'}},
        {"id": "toolu_2", "type": "function",
         "function": {"name": "get_time", "arguments": '{"tz":"Europe/Paris"}'}},
    ]).model_dump(),
    {"role": "tool", "tool_call_id": "toolu_1", "content": "12C"},
    {"role": "tool", "tool_call_id": "toolu_2", "content": "14:05"},
    {"role": "user", "content": [
        {"type": "text", "text": "Thanks. And this report?"},
        {"type": "file", "file": {"file_data": f"data:application/pdf;base64,{PDF}",
                                  "filename": "q3.pdf"}}]},
    {"role": "assistant", "content": "Sunny, 12C, and the report is fine."},
]
ANTHROPIC_SYSTEM = "You are terse."
ANTHROPIC_CONVERSATION: list[dict[str, Any]] = [
    {"role": "user", "content": [
        {"type": "text", "text": "Weather in Paris? Here is the map."},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                     "data": PNG}}]},
    {"role": "assistant", "content": [
        TextBlock(type="text", text="Let me check.").model_dump(),
        ToolUseBlock(type="tool_use", id="toolu_1", name="get_weather",
                     input={"city": "Paris", "unit": "C"}).model_dump(),
        ToolUseBlock(type="tool_use", id="toolu_2", name="get_time",
                     input={"tz": "Europe/Paris"}).model_dump()]},
    {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "12C"},
        {"type": "tool_result", "tool_use_id": "toolu_2", "content": "14:05"},
        {"type": "text", "text": "Thanks. And this report?"},
        {"type": "document", "title": "q3.pdf",
         "source": {"type": "base64", "media_type": "application/pdf", "data": PDF}}]},
    {"role": "assistant", "content": "Sunny, 12C, and the report is fine."},
]


def test_one_conversation_in_either_shape_is_stored_alike(ledger: Ledger) -> None:
    ledger.append_messages("openai", OPENAI_CONVERSATION)
    ledger.append_messages("anthropic", ANTHROPIC_CONVERSATION, system=ANTHROPIC_SYSTEM)
    from_openai = [e.data for e in ledger.events("openai")]
    assert from_openai == [e.data for e in ledger.events("anthropic")]
    assert [d["role"] for d in from_openai] == ["system", "user", "assistant", "tool", "tool",
                                                "user", "assistant"]
    view = ledger.view("anthropic", ViewRequest(history="full"))
    assert view.counts.tool == 2 and view.counts.total == 7
    assert view.history is not None
    assert [m.call_ids for m in view.history.messages][2] == ("toolu_1", "toolu_2")
    assert [m.tool_call_id for m in view.history.messages][3:5] == ["toolu_1", "toolu_2"]


# (what the app sends, the one line every append path refuses it with)
REFUSED: list[tuple[str, dict[str, Any], str]] = [
    ("openai-refusal", {"role": "assistant", "content": None, "refusal": "I can't."},
     "refusal: an assistant's refusal is not stored: keep its text as the content"),
    ("openai-audio", {"role": "assistant", "content": "x", "audio": {"id": "audio_1"}},
     "audio: an assistant's audio is not stored"),
    ("openai-function_call", {"role": "assistant", "content": None, "function_call": {
        "name": "f", "arguments": "{}"}},
     "function_call: function_call is deprecated: send tool_calls"),
    ("unknown-key", {"role": "user", "content": "x", "temperature": 1},
     "unknown message key 'temperature' (a message has content, is_error, message_id, "
     "name, role, tool_call_id, tool_calls)"),
    ("openai-input_audio", {"role": "user", "content": [
        {"type": "input_audio", "input_audio": {"data": "AAA=", "format": "wav"}}]},
     "content[0]: input_audio parts are not stored: audio is not supported"),
    ("openai-refusal-part", {"role": "assistant", "content": [
        {"type": "refusal", "refusal": "no"}]},
     "content[0]: refusal parts are not stored: keep the refusal's text as a text part"),
    ("unknown-part-key", {"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "https://x/a.png", "size": 3}}]},
     "content[0].image_url: unknown key 'size' in a image_url part"),
    ("anthropic-thinking", {"role": "assistant", "content": [
        {"type": "thinking", "thinking": "hmm", "signature": "sig"},
        {"type": "text", "text": "Hi"}]},
     "content[0]: thinking blocks are not stored: drop them before appending"),
    ("anthropic-redacted_thinking", {"role": "assistant", "content": [
        {"type": "redacted_thinking", "data": "xyz"}]},
     "content[0]: redacted_thinking blocks are not stored: drop them before appending"),
    ("anthropic-server_tool_use", {"role": "assistant", "content": [
        {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {}}]},
     "content[0]: unknown part type 'server_tool_use' (known: text, image, file, and the "
     "OpenAI and Anthropic shapes of them)"),
    ("anthropic-cache_control", {"role": "user", "content": [
        {"type": "text", "text": "x", "cache_control": {"type": "ephemeral"}}]},
     "content[0]: cache_control is a request option, not content: leave it out"),
    ("anthropic-bad-base64", {"role": "user", "content": [{"type": "image", "source": {
        "type": "base64", "media_type": "image/png", "data": "not base64!"}}]},
     "content[0].source: data is not valid base64"),
    ("anthropic-tool_use-by-user", {"role": "user", "content": [
        {"type": "tool_use", "id": "t", "name": "f", "input": {}}]},
     "content[0]: a tool_use block belongs to an assistant message, not a user one"),
    ("anthropic-several-tool-results", {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "t1", "content": "a"},
        {"type": "tool_result", "tool_use_id": "t2", "content": "b"}]},
     "this message holds 2 messages (each Anthropic tool_result is a tool message of its "
     "own): append it with Ledger.append_messages"),
]


@pytest.mark.parametrize(("sent", "line"), [(sent, line) for _, sent, line in REFUSED],
                         ids=[name for name, _, _ in REFUSED])
def test_refused_shapes_are_one_line_and_write_nothing(ledger: Ledger, sent: dict[str, Any],
                                                       line: str) -> None:
    ledger.append("s1", {"type": "message.appended", "data": {"role": "user", "content": "hi"}})
    before = ledger_state(ledger)
    with pytest.raises(EventValidationError) as single:
        ledger.append("s1", {"type": "message.appended", "data": sent})
    assert one_line(single.value) == f"message.appended: data: {line}"
    if "append_messages" not in line:  # the batch path splits that message instead
        with pytest.raises(EventValidationError) as batch:
            ledger.append_messages("s1", [{"role": "user", "content": "ok"}, sent])
        assert one_line(batch.value) == f"messages[1]: {line}"
    assert ledger_state(ledger) == before


def test_append_messages_splits_and_numbers_a_message(ledger: Ledger) -> None:
    result = ledger.append_messages("s1", [
        {"role": "user", "content": "weather and time?"},
        {"role": "assistant", "message_id": "a", "content": [
            {"type": "tool_use", "id": "t1", "name": "weather", "input": {}},
            {"type": "tool_use", "id": "t2", "name": "time", "input": {}}]},
        {"role": "user", "message_id": "u", "content": [
            {"type": "tool_result", "tool_use_id": "t1", "content": "12C"},
            {"type": "tool_result", "tool_use_id": "t2", "content": "14:05", "is_error": True},
            {"type": "text", "text": "and tomorrow?"}]}])
    assert result.stream_version == 5
    stored = [e.data for e in ledger.events("s1")]
    assert [(d.get("message_id"), d["role"], d.get("tool_call_id")) for d in stored] == [
        (None, "user", None), ("a", "assistant", None), ("u#1", "tool", "t1"),
        ("u#2", "tool", "t2"), ("u#3", "user", None)]
    assert stored[3]["is_error"] is True and stored[4]["content"] == "and tomorrow?"
    # The pieces are messages of their own: one can be retracted by its id.
    ledger.append("s1", {"type": "message.retracted", "data": {"message_id": "u#3"}})
    assert ledger.view("s1").counts.user == 1


def test_append_messages_writes_all_or_nothing(ledger: Ledger) -> None:
    ledger.append_messages("s1", [{"role": "user", "content": "first"}])
    before = ledger_state(ledger)
    good = {"role": "user", "content": "fine"}
    cases = [
        # A piece of a split message breaks a canonical rule (a tool message with a file).
        ([good, {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t1", "content": "a"},
            {"type": "tool_result", "tool_use_id": "t2", "content": [
                {"type": "document", "source": {"type": "file", "file_id": "f1"}}]}]}],
         "messages[1] (message 2 of the 2 it splits into): content[0]: a tool message may "
         "not hold a file part (allowed: image, text)"),
        ([good, good, {"role": "user", "content": None}],
         "messages[2]: a user message needs content (only an assistant message with "
         "tool_calls may leave it out or null)"),
        ([good, "hello"], "messages[1]: a message must be an object, got a string"),
        ([], "no messages to append"),
        ([good, {"role": "user", "content": "x" * 2_000_000}],
         "messages[1]: event is 2000030 bytes, over the 1048576-byte limit"),
    ]
    for messages, line in cases:
        with pytest.raises(LedgerError) as caught:
            ledger.append_messages("s1", messages)
        assert one_line(caught.value) == line
    with pytest.raises(LedgerError, match="expected version 0"):
        ledger.append_messages("s1", [good], expected_version=0)
    with pytest.raises(LedgerError) as caught:
        ledger.append_messages("s1", [good], system=[{"type": "image", "source": {}}])
    assert one_line(caught.value) == "system[0]: must be a text block"
    assert ledger_state(ledger) == before


def test_events_text_shows_calls_and_results(ledger: Ledger) -> None:
    ledger.append_messages("s1", ANTHROPIC_CONVERSATION, system=ANTHROPIC_SYSTEM)
    lines = [event_summary(e) for e in ledger.events("s1")]
    assert lines == [
        "system: You are terse.",
        "user: Weather in Paris? Here is the map. [image]",
        'assistant: Let me check. -> get_weather({"city":"Paris","unit":"C"}), '
        'get_time({"tz":"Europe/Paris"})',
        "tool[toolu_1]: 12C",
        "tool[toolu_2]: 14:05",
        "user: Thanks. And this report? [file q3.pdf]",
        "assistant: Sunny, 12C, and the report is fine.",
    ]
    ledger.append("s1", {"type": "message.appended", "data": {
        "role": "assistant", "content": None, "tool_calls": [{
            "id": "call_1", "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'}}]}})
    ledger.append("s1", {"type": "message.appended", "data": {
        "role": "tool", "tool_call_id": "call_1", "content": "boom", "is_error": True}})
    assert [event_summary(e) for e in ledger.events("s1")[-2:]] == [
        'assistant -> get_weather({"city":"Paris"})', "tool[call_1] error: boom"]


# -- the command line ---------------------------------------------------------------------


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner(env={"CTXLEDGER_DB": None, "COLUMNS": "160"})


def test_cli_appends_messages_from_a_file_and_stdin(runner: CliRunner, db_url: str,
                                                    tmp_path: Path) -> None:
    source = tmp_path / "anthropic.json"
    source.write_text(json.dumps({"system": ANTHROPIC_SYSTEM,
                                  "messages": ANTHROPIC_CONVERSATION}), encoding="utf-8")
    first = runner.invoke(app, ["--db", db_url, "append-messages", "anthropic", str(source)])
    assert first.exit_code == 0, first.stderr
    assert json.loads(first.stdout) == {"positions": [1, 2, 3, 4, 5, 6, 7],
                                        "stream_version": 7}
    second = runner.invoke(app, ["--db", db_url, "append-messages", "openai", "-"],
                           input=json.dumps(OPENAI_CONVERSATION))
    assert second.exit_code == 0, second.stderr
    with Ledger.open(db_url) as ledger:
        assert ([e.data for e in ledger.events("openai")]
                == [e.data for e in ledger.events("anthropic")])
    shown = runner.invoke(app, ["--db", db_url, "events", "anthropic", "--format", "text"])
    assert shown.exit_code == 0, shown.stderr
    assert "tool[toolu_1]: 12C" in shown.stdout


@pytest.mark.parametrize(("text", "needle"), [
    ("[{", "error: invalid JSON: "),
    ('"hi"', "error: expected a list of messages or an object {\"system\", \"messages\"}"),
    ('{"model": "x", "messages": []}', "error: unknown key(s) 'model': expected a list of "
                                        "messages or an object {\"system\", \"messages\"}"),
    ('[{"role": "user", "content": "a"}, {"role": "user", "content": [{"type": "thinking"}]}]',
     "error: messages[1]: content[0]: thinking blocks are not stored: drop them before "
     "appending"),
    ('[{"role": "tool", "content": "a"}]', "error: messages[0]: a tool message "
                                           "needs tool_call_id, the id of the call it answers"),
])
def test_cli_refuses_bad_input_and_writes_nothing(runner: CliRunner, db_url: str, text: str,
                                                  needle: str) -> None:
    with Ledger.open(db_url) as ledger:
        ledger.append("s1", {"type": "message.appended", "data": {"role": "user",
                                                                  "content": "hi"}})
        before = ledger_state(ledger)
    result = runner.invoke(app, ["--db", db_url, "append-messages", "s1", "-"], input=text)
    assert one_error_line(result, needle).startswith(needle)
    with Ledger.open(db_url) as ledger:
        assert ledger_state(ledger) == before


def test_cli_bad_input_never_creates_a_database(runner: CliRunner, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'new.db'}"
    result = runner.invoke(app, ["--db", url, "append-messages", "s1", "-"],
                           input='[{"role": "user", "content": "x", "refusal": "no"}]')
    one_error_line(result, "messages[0]: refusal: ")
    assert not (tmp_path / "new.db").exists()
