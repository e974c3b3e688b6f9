"""``LedgerSession``: the OpenAI Agents SDK's ``Runner`` keeps its session in a ledger.

The model is a real ``agents.Model`` subclass that answers from a script (no network);
everything else (the runner, the tool, the session protocol, the item types) is the SDK's.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from agents import Agent, Model, ModelResponse, RunConfig, Runner, Usage, function_tool
from agents.memory import Session
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

from ctxledger import EventValidationError, Ledger
from ctxledger.integrations.openai_agents import LedgerSession


def _say(text: str, ident: str) -> ResponseOutputMessage:
    return ResponseOutputMessage(
        id=ident, type="message", role="assistant", status="completed",
        content=[ResponseOutputText(type="output_text", text=text, annotations=[])])


def _call(name: str, arguments: dict[str, Any], call_id: str) -> ResponseFunctionToolCall:
    return ResponseFunctionToolCall(type="function_call", name=name, call_id=call_id,
                                    arguments=json.dumps(arguments), id=f"fc_{call_id}",
                                    status="completed")


class ScriptedModel(Model):
    """Answers each call with the next scripted output, and keeps the input it got."""

    def __init__(self, script: list[list[Any]]) -> None:
        self.script = list(script)
        self.inputs: list[Any] = []

    async def get_response(self, system_instructions: Any, input: Any, model_settings: Any,
                           tools: Any, output_schema: Any, handoffs: Any, tracing: Any, *,
                           previous_response_id: Any = None, conversation_id: Any = None,
                           prompt: Any = None) -> ModelResponse:
        self.inputs.append(input)
        return ModelResponse(output=self.script.pop(0), usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise NotImplementedError("the tests do not stream")


@function_tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"19 C and clear in {city}"


def test_a_run_with_a_tool_call_then_a_second_run_continues_the_session(
        ledger: Ledger) -> None:
    model = ScriptedModel([
        [_call("get_weather", {"city": "Lisbon"}, "call_1")],
        [_say("It is 19 C and clear in Lisbon.", "msg_1")],
        [_say("Yes, a light jacket is enough.", "msg_2")],
    ])
    agent = Agent(name="Atlas", instructions="Be brief.", model=model, tools=[get_weather])
    session = LedgerSession(ledger, "trip-1")
    assert isinstance(session, Session)

    # No tracing: nothing leaves the machine.
    config = RunConfig(tracing_disabled=True)
    first = Runner.run_sync(agent, "Weather in Lisbon?", session=session, run_config=config)
    assert first.final_output == "It is 19 C and clear in Lisbon."
    second = Runner.run_sync(agent, "Is a jacket enough?", session=session, run_config=config)
    assert second.final_output == "Yes, a light jacket is enough."

    # The second run's model saw the first run's items, from the ledger.
    seen = model.inputs[2]
    assert [item.get("type", "message") for item in seen] == [
        "message", "function_call", "function_call_output", "message", "message"]
    assert seen[2]["output"] == "19 C and clear in Lisbon"

    # Stored as canonical chat messages, one per item.
    stored = [e.data for e in ledger.messages("trip-1")]
    assert [m["role"] for m in stored] == ["user", "assistant", "tool", "assistant", "user",
                                           "assistant"]
    assert stored[1]["tool_calls"] == [{"id": "call_1", "type": "function", "function": {
        "name": "get_weather", "arguments": '{"city": "Lisbon"}'}}]
    assert stored[2]["tool_call_id"] == "call_1"
    assert stored[3]["content"] == [{"type": "text", "text": "It is 19 C and clear in Lisbon."}]

    # And read back as the items the runner added, exactly.
    items = asyncio.run(session.get_items())
    assert items[:5] == seen
    assert items[5] == second.new_items[-1].to_input_item()
    assert asyncio.run(session.get_items(limit=2)) == items[-2:]


def test_pop_and_clear_are_retractions_the_log_keeps(ledger: Ledger) -> None:
    session = LedgerSession(ledger, "s")
    items: list[Any] = [{"role": "user", "content": "one"},
                        {"role": "assistant", "content": "two"},
                        {"role": "user", "content": [{"type": "input_text", "text": "three"}]}]
    asyncio.run(session.add_items(items))
    assert asyncio.run(session.pop_item()) == items[2]
    assert asyncio.run(session.get_items()) == items[:2]
    asyncio.run(session.clear_session())
    assert asyncio.run(session.get_items()) == []
    assert asyncio.run(session.pop_item()) is None
    kinds = [e.type for e in ledger.events("s")]
    assert kinds == ["message.appended"] * 3 + ["message.retracted"] * 3
    # Replay up to before the clear still has the two messages.
    before = ledger.events("s")[3].position
    assert [m.item for m in ledger.replay("s", before).messages] == [
        f"message:{e.event_id}" for e in ledger.events("s")[:2]]


def test_an_item_the_form_cannot_hold_writes_nothing(ledger: Ledger) -> None:
    session = LedgerSession(ledger, "s")
    bad: list[Any] = [{"role": "user", "content": "fine"},
                      {"type": "reasoning", "id": "rs_1", "summary": []}]
    with pytest.raises(EventValidationError, match=r"^items\[1\]: a reasoning item is not stored"):
        asyncio.run(session.add_items(bad))
    broken: list[Any] = [{"role": "user", "content": "fine"},
                         {"type": "function_call", "call_id": "c", "name": "f",
                          "arguments": "not json"}]
    with pytest.raises(EventValidationError, match=r"^items\[1\]: .*not JSON"):
        asyncio.run(session.add_items(broken))
    assert ledger.events("s") == []


def test_context_limit_returns_the_fitted_window(ledger: Ledger) -> None:
    full = LedgerSession(ledger, "long")
    asyncio.run(full.add_items([{"role": "user" if n % 2 == 0 else "assistant",
                                 "content": f"message number {n} " + "word " * 40}
                                for n in range(20)]))
    everything = asyncio.run(full.get_items())
    fitted = asyncio.run(LedgerSession(ledger, "long", context_limit=300).get_items())
    assert 0 < len(fitted) < len(everything)
    assert fitted == everything[-len(fitted):]
    window = ledger.history_window("long", 300)
    assert len(window) == len(fitted)
    limited = LedgerSession(ledger, "long", context_limit=300)
    assert asyncio.run(limited.get_items(limit=2)) == fitted[-2:]
    assert asyncio.run(limited.get_items(limit=100)) == fitted
