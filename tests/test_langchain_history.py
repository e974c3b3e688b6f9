"""``LedgerChatMessageHistory``: LangChain's chat history kept in a ledger, on both
backends; messages read back equal to the ones added, tool calls and results included."""

from __future__ import annotations

import pytest
from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    ChatMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)

from ctxledger import EventValidationError, Ledger
from ctxledger.integrations.langchain import LedgerChatMessageHistory

CONVERSATION: list[BaseMessage] = [
    SystemMessage(content="You are Atlas."),
    HumanMessage(content="Weather and time in Lisbon?", name="nadia", id="u1"),
    AIMessage(content="", id="a1", tool_calls=[
        {"name": "get_weather", "args": {"city": "Lisbon", "unit": "celsius"}, "id": "call_w"},
        {"name": "get_time", "args": {"timezone": "Europe/Lisbon"}, "id": "call_t"}],
        response_metadata={"model_name": "gpt-4o", "finish_reason": "tool_calls"},
        usage_metadata={"input_tokens": 40, "output_tokens": 12, "total_tokens": 52}),
    ToolMessage(content='{"temperature": 19}', tool_call_id="call_w", name="get_weather"),
    ToolMessage(content="clock unavailable", tool_call_id="call_t", status="error",
                artifact={"retry": True}),
    AIMessage(content=[{"type": "text", "text": "19 C; the clock failed."}],
              additional_kwargs={"refusal": None}),
    ChatMessage(role="developer", content="Keep answers short."),
    HumanMessage(content=[{"type": "text", "text": "Thanks!"},
                          {"type": "image_url", "image_url": {"url": "https://x.test/a.png"}}]),
]


def test_it_is_a_base_chat_message_history(ledger: Ledger) -> None:
    assert isinstance(LedgerChatMessageHistory(ledger, "s"), BaseChatMessageHistory)


def test_messages_round_trip_exactly(ledger: Ledger) -> None:
    history = LedgerChatMessageHistory(ledger, "trip")
    history.add_messages(CONVERSATION[:4])
    history.add_messages(CONVERSATION[4:])
    again = LedgerChatMessageHistory(ledger, "trip").messages
    assert again == CONVERSATION
    assert [type(m) for m in again] == [type(m) for m in CONVERSATION]
    # Stored in the canonical chat form, the tool calls as the chat APIs hold them.
    stored = [e.data for e in ledger.messages("trip")]
    assert stored[2]["tool_calls"][0] == {"id": "call_w", "type": "function", "function": {
        "name": "get_weather", "arguments": '{"city": "Lisbon", "unit": "celsius"}'}}
    assert (stored[4]["tool_call_id"], stored[4]["is_error"]) == ("call_t", True)
    assert stored[7]["content"][1] == {"type": "image", "url": "https://x.test/a.png"}
    # ... so the card profile assembles them as chat messages.
    assembly = ledger.assemble("trip", "card")
    assert [m.role for m in assembly.messages if m.item] == [
        "system", "user", "assistant", "tool", "tool", "assistant", "developer", "user"]


def test_async_api_and_clear(ledger: Ledger) -> None:
    import asyncio

    history = LedgerChatMessageHistory(ledger, "s")
    asyncio.run(history.aadd_messages([HumanMessage(content="hi"), AIMessage(content="yo")]))
    assert asyncio.run(history.aget_messages()) == [HumanMessage(content="hi"),
                                                    AIMessage(content="yo")]
    history.clear()
    assert history.messages == []
    assert [e.type for e in ledger.events("s")] == ["message.appended"] * 2 + [
        "message.retracted"] * 2


def test_concurrent_clears_retract_each_message_once(ledger: Ledger) -> None:
    import threading

    history = LedgerChatMessageHistory(ledger, "racing")
    history.add_messages([HumanMessage(content=f"m{n}") for n in range(5)])
    start = threading.Barrier(3)
    errors: list[BaseException] = []

    def clear() -> None:
        try:
            start.wait()
            history.clear()
        except BaseException as exc:  # reported by the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=clear) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert history.messages == []
    retracted = [e.data["message_id"] for e in ledger.events("racing")
                 if e.type == "message.retracted"]
    assert len(retracted) == len(set(retracted)) == 5


def test_a_message_id_appended_again_replaces_the_older_message(ledger: Ledger) -> None:
    history = LedgerChatMessageHistory(ledger, "s")
    history.add_messages([HumanMessage(content="draft", id="m1")])
    assert history.messages == [HumanMessage(content="draft", id="m1")]  # read, and kept
    history.add_messages([HumanMessage(content="final", id="m1")])
    assert history.messages == [HumanMessage(content="final", id="m1")]


def test_a_history_kept_between_reads_sees_every_writer(ledger: Ledger) -> None:
    """A history reads only what came since its last read, and still sees what another
    writer added, retracted or erased in between."""
    mine, other = (LedgerChatMessageHistory(ledger, "s") for _ in range(2))
    mine.add_messages([HumanMessage(content="a"), AIMessage(content="b")])
    assert mine.messages == [HumanMessage(content="a"), AIMessage(content="b")]
    other.add_messages([HumanMessage(content="c")])
    assert mine.messages == [HumanMessage(content="a"), AIMessage(content="b"),
                             HumanMessage(content="c")]
    ledger.pop_message("s")
    assert mine.messages == [HumanMessage(content="a"), AIMessage(content="b")]
    ledger.erase(session="s", reason="asked")
    assert mine.messages == [] == LedgerChatMessageHistory(ledger, "s").messages


@pytest.mark.parametrize(("message", "fragment"), [
    (AIMessage(content="", tool_calls=[{"name": "f", "args": {}, "id": None}]), "no id"),
    (ToolMessage(content="x", tool_call_id=""), "tool_call_id"),
    (AIMessage(content="x", additional_kwargs={"when": object()}), "must be JSON"),
])
def test_a_message_the_form_cannot_hold_writes_nothing(ledger: Ledger, message: BaseMessage,
                                                        fragment: str) -> None:
    history = LedgerChatMessageHistory(ledger, "s")
    with pytest.raises(EventValidationError, match=rf"^messages\[1\]: .*{fragment}"):
        history.add_messages([HumanMessage(content="fine"), message])
    assert ledger.events("s") == []
