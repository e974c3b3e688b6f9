"""What the provider billed, read from the SDKs' own objects, on SQLite and PostgreSQL:
OpenAI's ``ChatCompletion`` and ``Response``, Anthropic's ``Message``, an Agents
``ModelResponse``, a LangChain ``AIMessage`` (recorded by the chat history itself)."""

from __future__ import annotations

from typing import Any

import pytest
from agents.items import ModelResponse
from agents.usage import Usage as AgentsUsage
from anthropic.types import Message as AnthropicMessage
from langchain_core.messages import AIMessage, HumanMessage
from openai.types.chat import ChatCompletion
from openai.types.responses import Response

from ctxledger import Ledger
from ctxledger.integrations import report_usage_of
from ctxledger.integrations.langchain import LedgerChatMessageHistory
from ctxledger.integrations.openai_agents import LedgerSession
from ctxledger.store.errors import LedgerError


def started(ledger: Ledger, session: str = "s") -> None:
    ledger.append(session, [{"type": "session.started", "data": {"scope": "p"}},
                            {"type": "message.appended",
                             "data": {"role": "user", "content": "Where to?"}}])


def billed(ledger: Ledger, session: str = "s") -> list[dict[str, Any]]:
    return [e.data for e in ledger.events(session) if e.type == "usage.reported"]


CHAT_COMPLETION = ChatCompletion.model_validate({
    "id": "c1", "object": "chat.completion", "created": 1, "model": "gpt-4o-2024-08-06",
    "choices": [{"index": 0, "finish_reason": "stop",
                 "message": {"role": "assistant", "content": "North."}}],
    "usage": {"prompt_tokens": 120, "completion_tokens": 4, "total_tokens": 124,
              "prompt_tokens_details": {"cached_tokens": 64}}})
RESPONSE = Response.model_validate({
    "id": "r1", "object": "response", "created_at": 1, "model": "gpt-5-mini",
    "output": [], "parallel_tool_calls": False, "tool_choice": "auto", "tools": [],
    "usage": {"input_tokens": 90, "output_tokens": 7, "total_tokens": 97,
              "input_tokens_details": {"cached_tokens": 10, "cache_write_tokens": 0},
              "output_tokens_details": {"reasoning_tokens": 0}}})
ANTHROPIC = AnthropicMessage.model_validate({
    "id": "m1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
    "content": [{"type": "text", "text": "North."}], "stop_reason": "end_turn",
    "stop_sequence": None,
    "usage": {"input_tokens": 15, "output_tokens": 5, "cache_read_input_tokens": 200,
              "cache_creation_input_tokens": 30}})


@pytest.mark.parametrize(("response", "expected"), [
    (CHAT_COMPLETION, ("gpt-4o-2024-08-06", 120, 4, 64)),
    (RESPONSE, ("gpt-5-mini", 90, 7, 10)),
    # Anthropic's input_tokens leave the cache out: the input is all three.
    (ANTHROPIC, ("claude-sonnet-4-5", 245, 5, 200)),
])
def test_a_response_records_what_it_billed(ledger: Ledger, response: Any,
                                           expected: tuple[Any, ...]) -> None:
    started(ledger)
    assembly = ledger.assemble("s", "card")
    ledger.record_assembly("s", assembly)
    report_usage_of(ledger, "s", response, assembly=assembly, cost=0.01)
    (data,) = billed(ledger)
    assert (data["model"], data["input_tokens"], data["output_tokens"],
            data["cached_tokens"]) == expected
    assert data["digest"] == assembly.digest and data["cost"] == 0.01
    audit = ledger.audit("s")
    assert audit.entries[0].billed_input_tokens == expected[1]


def test_an_agents_run_records_each_model_response(ledger: Ledger) -> None:
    started(ledger)
    session = LedgerSession(ledger, "s")
    responses = [ModelResponse(output=[], usage=AgentsUsage(
        requests=1, input_tokens=50 + n, output_tokens=5, total_tokens=55 + n),
        response_id=f"r{n}") for n in range(2)]

    class Run:  # what the runner's RunResult holds for this: its raw responses
        raw_responses = responses

    done = session.report_run_usage(Run(), model="gpt-4.1")
    assert len(done) == 2
    assert [(d["model"], d["input_tokens"]) for d in billed(ledger)] == [
        ("gpt-4.1", 50), ("gpt-4.1", 51)]
    session.report_run_usage(responses[0], model="gpt-4.1")
    assert len(billed(ledger)) == 3
    with pytest.raises(LedgerError, match="names no model"):
        report_usage_of(ledger, "s", responses[0])


def test_the_langchain_history_records_a_replys_usage_with_it(ledger: Ledger) -> None:
    history = LedgerChatMessageHistory(ledger, "s")
    reply = AIMessage(content="North.", usage_metadata={
        "input_tokens": 33, "output_tokens": 2, "total_tokens": 35,
        "input_token_details": {"cache_read": 8}},
        response_metadata={"model_name": "gpt-4o-mini"})
    history.add_messages([HumanMessage(content="Where to?"), reply,
                          AIMessage(content="no usage known")])
    assert billed(ledger) == [{"model": "gpt-4o-mini", "input_tokens": 33,
                               "output_tokens": 2, "cached_tokens": 8}]
    assert [m.content for m in history.messages] == ["Where to?", "North.", "no usage known"]
    # A bad reply writes nothing of the batch, and names the message.
    head = ledger.head()
    bad = AIMessage(content="x", usage_metadata={
        "input_tokens": 1, "output_tokens": 1, "total_tokens": 2,
        "input_token_details": {"cache_read": 5}}, response_metadata={"model_name": "m"})
    with pytest.raises(LedgerError, match=r"messages\[1\]: .*cached_tokens \(5\) exceeds"):
        history.add_messages([HumanMessage(content="again"), bad])
    assert ledger.head() == head
