"""``to_openai`` and ``to_anthropic``: the messages form in each chat API's shape.

Every output is checked against the SDKs' own request types (``openai`` and ``anthropic``
are dev dependencies) and, once, sent by the real SDK clients to a local HTTP server that
records what arrived.
"""

from __future__ import annotations

import base64
import hashlib
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import anthropic
import openai
import pytest
from helpers.chat_shapes import valid_anthropic, valid_openai
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from ctxledger.assembler.chat_formats.anthropic import to_anthropic
from ctxledger.assembler.chat_formats.openai import to_openai
from ctxledger.assembler.errors import ChatFormatError
from ctxledger.assembler.model import ContextMessage


def _m(role: str, content: Any, **fields: Any) -> ContextMessage:
    return ContextMessage(role=role, content=content, sections=[], tokens=0, **fields)


def _call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function",
            "function": {"name": name, "arguments": arguments}}


WEATHER = [
    _m("system", "You are a travel assistant. Use the tools."),
    _m("user", "What's the weather and the time in Lisbon?", name="nadia"),
    _m("assistant", None, tool_calls=[
        _call("call_w1", "get_weather", '{"city": "Lisbon", "unit": "C"}'),
        _call("call_t1", "get_time", '{"tz": "Europe/Lisbon"}')]),
    _m("tool", '{"temp_c": 21, "sky": "clear"}', tool_call_id="call_w1"),
    _m("tool", '{"time": "14:05"}', tool_call_id="call_t1"),
    _m("assistant", "It's 21 °C and clear in Lisbon, and 14:05 there."),
]


# -- OpenAI -------------------------------------------------------------------------------


def test_openai_plain_chat_passes_as_it_is() -> None:
    messages = [_m("system", "Be brief."), _m("user", "Hi"), _m("assistant", "Hello."),
                _m("developer", "Answer in French.")]
    out = to_openai(messages)
    assert out == [{"role": "system", "content": "Be brief."},
                   {"role": "user", "content": "Hi"},
                   {"role": "assistant", "content": "Hello."},
                   {"role": "developer", "content": "Answer in French."}]
    valid_openai(out)


def test_openai_tool_calls_and_their_results() -> None:
    out = to_openai(WEATHER)
    valid_openai(out)
    assert out[1] == {"role": "user", "name": "nadia",
                      "content": "What's the weather and the time in Lisbon?"}
    assert out[2] == {"role": "assistant", "content": None, "tool_calls": [
        _call("call_w1", "get_weather", '{"city": "Lisbon", "unit": "C"}'),
        _call("call_t1", "get_time", '{"tz": "Europe/Lisbon"}')]}
    assert out[3] == {"role": "tool", "tool_call_id": "call_w1",
                      "content": '{"temp_c": 21, "sky": "clear"}'}
    assert [list(message) for message in out] == [
        ["role", "content"], ["role", "name", "content"], ["role", "content", "tool_calls"],
        ["role", "tool_call_id", "content"], ["role", "tool_call_id", "content"],
        ["role", "content"]]


def test_openai_keeps_names_where_the_role_takes_one() -> None:
    messages = [_m("system", "Narrate.", name="narrator"), _m("user", "Hi", name="ana"),
                _m("assistant", "", name="Elias",
                   tool_calls=[_call("c1", "roll_dice", '{"sides": 20}')]),
                _m("tool", "17", tool_call_id="c1", is_error=False),
                _m("assistant", "A 17!", name="Elias")]
    out = to_openai(messages)
    valid_openai(out)
    assert [message.get("name") for message in out] == ["narrator", "ana", "Elias", None,
                                                        "Elias"]
    assert "is_error" not in out[3]


def test_openai_parts_become_image_url_and_file_parts() -> None:
    pdf = b"%PDF-1.4 tiny"
    digest = hashlib.sha256(pdf).hexdigest()
    messages = [_m("user", [
        {"type": "text", "text": "Compare these."},
        {"type": "image", "url": "https://example.com/a.png", "detail": "low"},
        {"type": "image", "url": "data:image/png;base64,iVBORw0KGgo="},
        {"type": "file", "file_id": "file-abc123"},
        {"type": "file", "url": "data:application/pdf;base64,JVBERi0=", "filename": "a.pdf"},
        {"type": "file", "media_type": "application/pdf", "sha256": digest}])]
    out = to_openai(messages, resolve_media=lambda media_type, sha: pdf)
    valid_openai(out)
    assert out[0]["content"] == [
        {"type": "text", "text": "Compare these."},
        {"type": "image_url", "image_url": {"url": "https://example.com/a.png",
                                            "detail": "low"}},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
        {"type": "file", "file": {"file_id": "file-abc123"}},
        {"type": "file", "file": {"filename": "a.pdf",
                                  "file_data": "data:application/pdf;base64,JVBERi0="}},
        {"type": "file", "file": {
            "filename": "file.pdf",
            "file_data": "data:application/pdf;base64," + base64.b64encode(pdf).decode()}}]


def test_openai_moves_tool_images_after_the_tool_messages() -> None:
    messages = [_m("user", "Show me both charts."),
                _m("assistant", None, tool_calls=[_call("a", "chart", "{}"),
                                                  _call("b", "chart", '{"n": 2}')]),
                _m("tool", [{"type": "image", "url": "https://example.com/1.png"}],
                   tool_call_id="a"),
                _m("tool", [{"type": "text", "text": "chart 2"},
                            {"type": "image", "url": "https://example.com/2.png"}],
                   tool_call_id="b"),
                _m("assistant", "Here they are.")]
    out = to_openai(messages)
    valid_openai(out)
    assert [message["role"] for message in out] == ["user", "assistant", "tool", "tool",
                                                    "user", "assistant"]
    assert out[2]["content"] == "(the images follow in the next user message)"
    assert out[3]["content"] == [{"type": "text", "text": "chart 2"}]
    assert out[4]["content"] == [
        {"type": "text", "text": "Images returned by tool call a:"},
        {"type": "image_url", "image_url": {"url": "https://example.com/1.png"}},
        {"type": "text", "text": "Images returned by tool call b:"},
        {"type": "image_url", "image_url": {"url": "https://example.com/2.png"}}]


def test_openai_cannot_take_a_file_by_url() -> None:
    messages = [_m("user", [{"type": "file", "url": "https://example.com/a.pdf"}])]
    with pytest.raises(ChatFormatError, match=r"message 0 \(user\), content\[0\]: OpenAI "
                                              "takes a file as a file id or inline data"):
        to_openai(messages)


# -- Anthropic ----------------------------------------------------------------------------


def test_anthropic_plain_chat() -> None:
    messages = [_m("system", "Be brief."), _m("developer", "Answer in French."),
                _m("user", "Hi"), _m("assistant", "Bonjour.")]
    out = to_anthropic(messages)
    assert out == {"system": [{"type": "text", "text": "Be brief."},
                              {"type": "text", "text": "Answer in French."}],
                   "messages": [{"role": "user", "content": "Hi"},
                                {"role": "assistant", "content": "Bonjour."}]}
    valid_anthropic(out)
    assert list(out) == ["system", "messages"]


def test_anthropic_leaves_system_out_when_there_is_none() -> None:
    out = to_anthropic([_m("user", "Hi")])
    assert out == {"messages": [{"role": "user", "content": "Hi"}]}
    valid_anthropic(out)


def test_anthropic_tool_calls_and_their_results() -> None:
    messages = [*WEATHER[:4],
                _m("tool", "time service down", tool_call_id="call_t1", is_error=True),
                WEATHER[5]]
    out = to_anthropic(messages)
    valid_anthropic(out)
    assert out["system"] == [{"type": "text", "text": "You are a travel assistant. Use the "
                                                      "tools."}]
    assert out["messages"][1] == {"role": "assistant", "content": [
        {"type": "tool_use", "id": "call_w1", "name": "get_weather",
         "input": {"city": "Lisbon", "unit": "C"}},
        {"type": "tool_use", "id": "call_t1", "name": "get_time",
         "input": {"tz": "Europe/Lisbon"}}]}
    assert out["messages"][2] == {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "call_w1",
         "content": '{"temp_c": 21, "sky": "clear"}'},
        {"type": "tool_result", "tool_use_id": "call_t1", "content": "time service down",
         "is_error": True}]}
    # The user's name has no field in this API: dropped.
    assert out["messages"][0] == {"role": "user",
                                  "content": "What's the weather and the time in Lisbon?"}


def test_anthropic_system_later_in_the_list_is_user_text() -> None:
    messages = [_m("system", "You are Elias."), _m("assistant", "Inside, quick."),
                _m("user", "Thanks."), _m("system", "Keep replies under 150 words.")]
    out = to_anthropic(messages)
    valid_anthropic(out)
    assert out["system"] == [{"type": "text", "text": "You are Elias."}]
    assert out["messages"] == [
        {"role": "assistant", "content": "Inside, quick."},
        {"role": "user", "content": [{"type": "text", "text": "Thanks."},
                                     {"type": "text", "text": "Keep replies under 150 words."}]}]


def test_anthropic_instructions_after_tool_results_follow_them() -> None:
    messages = [*WEATHER[:5], _m("system", "Answer in one sentence.")]
    out = to_anthropic(messages)
    valid_anthropic(out)
    last = out["messages"][-1]
    assert [block["type"] for block in last["content"]] == ["tool_result", "tool_result",
                                                            "text"]


def test_anthropic_merges_consecutive_turns_of_one_role() -> None:
    messages = [_m("user", "First."), _m("user", [{"type": "text", "text": "Second."}]),
                _m("assistant", "One."), _m("assistant", "   "), _m("assistant", "Two."),
                _m("user", "")]
    out = to_anthropic(messages)
    valid_anthropic(out)
    assert out["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "First."},
                                     {"type": "text", "text": "Second."}]},
        {"role": "assistant", "content": [{"type": "text", "text": "One."},
                                          {"type": "text", "text": "Two."}]}]


def test_anthropic_images_and_documents() -> None:
    png = b"\x89PNG\r\n\x1a\nfake"
    digest = hashlib.sha256(png).hexdigest()
    note = base64.b64encode(b"ship log, day 3").decode()
    messages = [_m("user", [
        {"type": "text", "text": "Look."},
        {"type": "image", "url": "https://example.com/a.jpg", "detail": "high"},
        {"type": "image", "media_type": "image/png", "sha256": digest},
        {"type": "file", "file_id": "file_011abc", "filename": "log.pdf"},
        {"type": "file", "url": "https://example.com/chart.pdf"},
        {"type": "file", "url": "data:application/pdf;base64,JVBERi0="},
        {"type": "file", "url": f"data:text/plain;charset=utf-8;base64,{note}"}])]
    out = to_anthropic(messages, resolve_media=lambda media_type, sha: png)
    valid_anthropic(out)
    assert out["messages"][0]["content"] == [
        {"type": "text", "text": "Look."},
        {"type": "image", "source": {"type": "url", "url": "https://example.com/a.jpg"}},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                     "data": base64.b64encode(png).decode()}},
        {"type": "document", "source": {"type": "file", "file_id": "file_011abc"},
         "title": "log.pdf"},
        {"type": "document", "source": {"type": "url",
                                        "url": "https://example.com/chart.pdf"}},
        {"type": "document", "source": {"type": "base64", "media_type": "application/pdf",
                                        "data": "JVBERi0="}},
        {"type": "document", "source": {"type": "text", "media_type": "text/plain",
                                        "data": "ship log, day 3"}}]


def test_anthropic_refuses_media_it_cannot_take() -> None:
    bmp = [_m("user", [{"type": "image", "url": "data:image/bmp;base64,Qk0="}])]
    with pytest.raises(ChatFormatError, match=r"takes images as image/jpeg.*not image/bmp"):
        to_anthropic(bmp)
    zip_file = [_m("user", [{"type": "file", "url": "data:application/zip;base64,UEs="}])]
    with pytest.raises(ChatFormatError, match="not application/zip"):
        to_anthropic(zip_file)
    not_base64 = [_m("user", [{"type": "image", "url": "data:image/png,raw"}])]
    with pytest.raises(ChatFormatError, match="a data: URL must be base64"):
        to_anthropic(not_base64)


# -- both ---------------------------------------------------------------------------------


@pytest.mark.parametrize("convert", [to_openai, to_anthropic], ids=["openai", "anthropic"])
def test_media_held_by_hash_needs_a_resolver_that_gives_those_bytes(convert: Any) -> None:
    digest = hashlib.sha256(b"the real bytes").hexdigest()
    messages = [_m("user", "Describe it."),
                _m("user", [{"type": "image", "media_type": "image/png", "sha256": digest}])]
    with pytest.raises(ChatFormatError) as raised:
        convert(messages)
    assert str(raised.value) == (
        f"message 1 (user), content[0]: the image image/png sha256:{digest[:12]} is held by "
        "its hash only; pass resolve_media=(media_type, sha256) -> bytes to send it to "
        + ("OpenAI" if convert is to_openai else "Anthropic"))
    with pytest.raises(ChatFormatError, match="do not have that hash"):
        convert(messages, resolve_media=lambda media_type, sha: b"other bytes")
    asked: list[tuple[str, str]] = []

    def resolver(media_type: str, sha: str) -> bytes:
        asked.append((media_type, sha))
        return b"the real bytes"

    convert(messages, resolve_media=resolver)
    assert asked == [("image/png", digest)]


ORPHANS = {
    "tool-without-call": ([_m("user", "Hi"), _m("tool", "42", tool_call_id="c9")],
                          r"message 1 \(tool\) answers tool call 'c9', which is not an "
                          "unanswered call"),
    "call-without-answer": ([_m("user", "Hi"),
                             _m("assistant", None, tool_calls=[_call("c1", "f", "{}"),
                                                               _call("c2", "f", "{}")]),
                             _m("tool", "1", tool_call_id="c1"), _m("user", "And?")],
                            r"tool call 'c2' of message 1 \(assistant\) has no tool message "
                            r"before message 3 \(user\)"),
    "list-ends-first": ([_m("user", "Hi"),
                         _m("assistant", None, tool_calls=[_call("c1", "f", "{}")])],
                        "the list ends first"),
    "answered-twice": ([_m("user", "Hi"),
                        _m("assistant", None, tool_calls=[_call("c1", "f", "{}")]),
                        _m("tool", "1", tool_call_id="c1"), _m("tool", "1", tool_call_id="c1")],
                       r"message 3 \(tool\) answers tool call 'c1'"),
    "answer-after-a-user-turn": ([_m("assistant", None, tool_calls=[_call("c1", "f", "{}")]),
                                  _m("user", "wait"), _m("tool", "1", tool_call_id="c1")],
                                 "has no tool message before message 1"),
}


@pytest.mark.parametrize("convert", [to_openai, to_anthropic], ids=["openai", "anthropic"])
@pytest.mark.parametrize("case", sorted(ORPHANS))
def test_unpaired_tool_messages_are_one_line_errors(convert: Any, case: str) -> None:
    messages, message = ORPHANS[case]
    with pytest.raises(ChatFormatError, match=message) as raised:
        convert(messages)
    assert "\n" not in str(raised.value)


def test_the_sdk_types_reject_what_the_apis_reject() -> None:
    """The checks have teeth: shapes each API refuses fail them."""
    good = to_openai(WEATHER)
    valid_openai(good)
    for broken in (
            [*good[:3], {"role": "tool", "content": None, "tool_call_id": "call_w1"}],
            [{"role": "user", "content": [{"type": "image", "url": "https://x/a.png"}]}],
            [{"role": "tool", "content": [{"type": "image_url", "image_url": {"url": "u"}}],
              "tool_call_id": "c"}],
            [{"role": "user", "content": "Hi", "tool_call_id": "c"}]):
        with pytest.raises((ValidationError, AssertionError)):
            valid_openai(broken)
    fine = to_anthropic(WEATHER)
    valid_anthropic(fine)
    for broken_request in (
            {"messages": [{"role": "tool", "content": "42"}]},
            {"messages": [{"role": "user", "content": "Hi", "name": "nadia"}]},
            {"messages": [{"role": "user", "content": [{"type": "image_url",
                                                        "image_url": {"url": "u"}}]}]},
            {"messages": [{"role": "user", "content": [
                {"type": "text", "text": "first"},
                {"type": "tool_result", "tool_use_id": "c"}]}]},
            {"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]},
            {"system": "text", "messages": []}):
        with pytest.raises((ValidationError, AssertionError)):
            valid_anthropic(broken_request)


def test_output_is_plain_json_and_the_same_every_time() -> None:
    for convert in (to_openai, to_anthropic):
        first = json.dumps(convert(WEATHER))
        assert json.loads(first) == convert(WEATHER)
        assert json.dumps(convert(list(WEATHER))) == first


# -- any well-formed list ------------------------------------------------------------------

_TEXT = st.text(alphabet="ab \n", max_size=6)
_PART = st.one_of(
    st.builds(lambda text: {"type": "text", "text": text}, _TEXT),
    st.just({"type": "image", "url": "https://example.com/i.png"}),
    st.just({"type": "file", "file_id": "file-1"}))
_NAME = st.one_of(st.none(), st.sampled_from(["ana", "bo"]))


@st.composite
def _conversations(draw: st.DrawFn) -> list[ContextMessage]:
    messages = [_m(role, draw(_TEXT), name=draw(_NAME))
                for role in draw(st.lists(st.sampled_from(["system", "developer"]),
                                          max_size=2))]
    for turn in range(draw(st.integers(0, 6))):
        kind = draw(st.sampled_from(["user", "assistant", "system", "calls"]))
        if kind == "calls":
            ids = [f"c{turn}_{n}" for n in range(draw(st.integers(1, 3)))]
            messages.append(_m("assistant", draw(st.one_of(st.none(), _TEXT)),
                               tool_calls=[_call(i, "f", '{"n": 1}') for i in ids]))
            messages.extend(_m("tool", draw(st.one_of(_TEXT, st.lists(
                st.builds(lambda t: {"type": "text", "text": t}, _TEXT), min_size=1,
                max_size=2))), tool_call_id=i, is_error=draw(st.sampled_from([None, True])))
                for i in ids)
        elif kind == "user":
            content = draw(st.one_of(_TEXT, st.lists(_PART, min_size=1, max_size=3)))
            messages.append(_m("user", content, name=draw(_NAME)))
        else:
            messages.append(_m(kind, draw(_TEXT), name=draw(_NAME)))
    return messages


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_conversations())
def test_any_well_formed_list_converts_to_valid_requests(
        messages: list[ContextMessage]) -> None:
    valid_openai(to_openai(messages))
    out = to_anthropic(messages)
    valid_anthropic(out)
    # Every call's results are in the user turn right after the turn that made it.
    turns = out["messages"]
    for index, turn in enumerate(turns):
        if isinstance(turn["content"], str):
            continue
        used = [b["id"] for b in turn["content"] if b["type"] == "tool_use"]
        if used:
            answered = [b["tool_use_id"] for b in turns[index + 1]["content"]
                        if b["type"] == "tool_result"]
            assert answered == used


# -- through the real SDK clients ---------------------------------------------------------


class _Recorder(BaseHTTPRequestHandler):
    """Records each request's path and JSON body; answers with ``reply``."""

    received: list[tuple[str, dict[str, Any]]]
    reply: dict[str, Any]

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.received.append((self.path, json.loads(body)))
        payload = json.dumps(self.reply).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: Any) -> None:  # keep pytest output clean
        pass


@pytest.fixture
def server() -> Iterator[tuple[str, type[_Recorder]]]:
    handler = type("Handler", (_Recorder,), {"received": [], "reply": {}})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", handler
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)


def test_the_openai_client_sends_to_openai_output(
        server: tuple[str, type[_Recorder]]) -> None:
    url, handler = server
    handler.reply = {"id": "chatcmpl-1", "object": "chat.completion", "created": 0,
                     "model": "gpt-test", "choices": [{
                         "index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": "ok"}}]}
    messages = to_openai(WEATHER)
    client = openai.OpenAI(api_key="test", base_url=f"{url}/v1", max_retries=0, timeout=10)
    reply = client.chat.completions.create(model="gpt-test", messages=messages)
    assert reply.choices[0].message.content == "ok"
    [(path, body)] = handler.received
    assert path == "/v1/chat/completions"
    assert body["messages"] == messages


def test_the_anthropic_client_sends_to_anthropic_output(
        server: tuple[str, type[_Recorder]]) -> None:
    url, handler = server
    handler.reply = {"id": "msg_1", "type": "message", "role": "assistant",
                     "model": "claude-test", "content": [{"type": "text", "text": "ok"}],
                     "stop_reason": "end_turn", "stop_sequence": None,
                     "usage": {"input_tokens": 1, "output_tokens": 1}}
    request = to_anthropic([*WEATHER, _m("user", [
        {"type": "text", "text": "And this?"},
        {"type": "image", "url": "data:image/png;base64,iVBORw0KGgo="}])])
    client = anthropic.Anthropic(api_key="test", base_url=url, max_retries=0, timeout=10)
    reply = client.messages.create(model="claude-test", max_tokens=64, **request)
    assert reply.content[0].type == "text"
    [(path, body)] = handler.received
    assert path == "/v1/messages"
    assert (body["system"], body["messages"]) == (request["system"], request["messages"])
