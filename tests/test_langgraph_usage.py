"""The LangGraph checkpointer records what the provider billed for each reply a graph's
step adds (``usage.reported``), from LangChain's own ``AIMessage.usage_metadata``, on
SQLite and PostgreSQL: once per reply, whichever saver sees it again."""

from __future__ import annotations

from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages

from ctxledger import Ledger, LedgerError
from ctxledger.integrations.langgraph import LedgerSaver

THREAD = {"configurable": {"thread_id": "chat-1"}}


class Chat(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


def reply_to(content: str, turn: int, *, model: str | None = "gpt-4o-mini",
             cache_read: int = 0) -> AIMessage:
    """A reply as a chat model returns it: its usage, and the model in its metadata."""
    return AIMessage(
        content=f"echo: {content}", id=f"a{turn}",
        usage_metadata={"input_tokens": 100 + turn, "output_tokens": 3 + turn,
                        "total_tokens": 103 + 2 * turn,
                        "input_token_details": {"cache_read": cache_read}},
        response_metadata={"model_name": model} if model is not None else {})


def chat_graph(saver: LedgerSaver, **reply: Any) -> Any:
    def answer(state: Chat) -> dict[str, Any]:
        turn = len(state["messages"])
        return {"messages": [reply_to(str(state["messages"][-1].content), turn, **reply)]}

    graph = StateGraph(Chat)
    graph.add_node("answer", answer)
    graph.add_edge(START, "answer")
    return graph.compile(checkpointer=saver)


def billed(ledger: Ledger) -> list[tuple[str, int, int, int, str]]:
    return [(e.data["model"], e.data["input_tokens"], e.data["output_tokens"],
             e.data["cached_tokens"], e.metadata["extra"]["langgraph"]["message_id"])
            for e in ledger.events("langgraph:chat-1") if e.type == "usage.reported"]


def say(graph: Any, turn: int) -> None:
    graph.invoke({"messages": [HumanMessage(content=f"hi {turn}", id=f"h{turn}")]}, THREAD)


def test_each_reply_is_billed_once_with_its_checkpoint(db_url: str) -> None:
    with Ledger.open(db_url, load_vocabulary=False) as ledger:
        graph = chat_graph(LedgerSaver(ledger))
        for turn in range(3):
            say(graph, turn)
        # Reply n answers a thread of 2n + 1 messages.
        assert billed(ledger) == [("gpt-4o-mini", 101, 4, 0, "a1"),
                                  ("gpt-4o-mini", 103, 6, 0, "a3"),
                                  ("gpt-4o-mini", 105, 8, 0, "a5")]
        # Each usage report is in the append of the checkpoint that first holds its reply.
        events = ledger.events("langgraph:chat-1")
        for index, event in enumerate(events):
            if event.type == "usage.reported":
                saved = events[index - 1]
                assert saved.type == "checkpoint.saved"
                assert event.metadata["extra"]["langgraph"]["checkpoint_id"] \
                    == saved.data["checkpoint_id"]

        # A fresh saver stores the messages whole at first: the replies billed before
        # are in it, and are not billed again.
        fresh = chat_graph(LedgerSaver(ledger))
        say(fresh, 3)
        assert [row[4] for row in billed(ledger)] == ["a1", "a3", "a5", "a7"]
        state = fresh.get_state(THREAD)
        assert [m.content for m in state.values["messages"]][-2:] == ["hi 3", "echo: hi 3"]
        assert state.values["messages"][-1].usage_metadata["input_tokens"] == 107


def test_a_reply_that_names_no_model_is_not_billed(db_url: str) -> None:
    with Ledger.open(db_url, load_vocabulary=False) as ledger:
        graph = chat_graph(LedgerSaver(ledger), model=None)
        say(graph, 0)
        assert billed(ledger) == []
        assert graph.get_state(THREAD).values["messages"][-1].content == "echo: hi 0"


def test_a_usage_report_the_log_refuses_writes_no_checkpoint(db_url: str) -> None:
    with Ledger.open(db_url, load_vocabulary=False) as ledger:
        graph = chat_graph(LedgerSaver(ledger), cache_read=500)
        say_first = ledger.head()
        with pytest.raises(LedgerError) as refused:
            say(graph, 0)
        message = str(refused.value)
        assert message.startswith("reply 'a1': usage: ")
        assert "cached_tokens (500) exceeds input_tokens (101)" in message
        assert "\n" not in message
        # The input's checkpoint went before the reply; the reply's step wrote nothing.
        assert not [e for e in ledger.events(after=say_first) if e.type == "usage.reported"]
        steps = [saved.metadata["step"] for saved in LedgerSaver(ledger).list(THREAD)]
        assert steps == [0, -1]  # no checkpoint of the answer's step (1)
