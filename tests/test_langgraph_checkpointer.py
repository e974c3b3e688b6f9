"""The LangGraph checkpointer: LangGraph's own conformance suite, on both backends, and a
real graph run whose checkpoints are deltas.

``langgraph-checkpoint-conformance`` runs every base capability (put, put_writes,
get_tuple, list, delete_thread) and the extended ones ``LedgerSaver`` implements
(copy_thread, delete_for_runs); it must detect them all and fail none.
"""

from __future__ import annotations

import asyncio
import operator
from collections.abc import AsyncGenerator
from typing import Annotated, Any, TypedDict

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages

from ctxledger import Ledger
from ctxledger.integrations.langgraph import LedgerSaver


def test_it_passes_langgraph_conformance(db_url: str) -> None:
    ledger = Ledger.open(db_url, load_vocabulary=False)

    @checkpointer_test(name="LedgerSaver")
    async def saver() -> AsyncGenerator[LedgerSaver, None]:
        yield LedgerSaver(ledger)

    try:
        report = asyncio.run(validate(saver))
    finally:
        ledger.close()
    results = report.results
    failures = {name: result.failures for name, result in results.items() if result.failures}
    assert failures == {}
    ran = {name for name, result in results.items() if result.detected}
    assert ran == {"put", "put_writes", "get_tuple", "list", "delete_thread",
                   "copy_thread", "delete_for_runs"}
    assert all(results[name].passed for name in ran), {n: results[n] for n in ran}


class Chat(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    turns: Annotated[int, operator.add]


def _chat_graph(saver: LedgerSaver) -> Any:
    def reply(state: Chat) -> dict[str, Any]:
        last = state["messages"][-1]
        answer = AIMessage(content=f"echo: {last.content}", id=f"a{len(state['messages'])}")
        return {"messages": [answer], "turns": 1}

    graph = StateGraph(Chat)
    graph.add_node("reply", reply)
    graph.add_edge(START, "reply")
    return graph.compile(checkpointer=saver)


def test_a_chat_graph_resumes_and_stores_only_what_each_step_adds(db_url: str) -> None:
    with Ledger.open(db_url, load_vocabulary=False) as ledger:
        graph = _chat_graph(LedgerSaver(ledger))
        config = {"configurable": {"thread_id": "chat-1"}}
        for turn in range(6):
            graph.invoke({"messages": [HumanMessage(content=f"hi {turn}", id=f"h{turn}")]},
                         config)
        state = graph.get_state(config)
        assert [m.content for m in state.values["messages"]][-2:] == ["hi 5", "echo: hi 5"]
        assert len(state.values["messages"]) == 12
        assert state.values["turns"] == 6

        saved = [e for e in ledger.events("langgraph:chat-1") if e.type == "checkpoint.saved"]
        tails = [entry for e in saved for entry in e.data["values"]
                 if entry["channel"] == "messages" and "tail" in entry]
        # After the first step each checkpoint holds only the messages that step added.
        assert tails and all(len(_tail_items(entry)) == 1 for entry in tails)

        # A fresh saver (no cache) reads the same state back, and continues it.
        again = _chat_graph(LedgerSaver(ledger))
        assert again.get_state(config).values == state.values
        again.invoke({"messages": [HumanMessage(content="more", id="h9")]}, config)
        assert [m.content for m in again.get_state(config).values["messages"]][-2:] == [
            "more", "echo: more"]

        # History, fork and delete.
        history = list(again.get_state_history(config))
        assert len(history) == len(
            [e for e in ledger.events("langgraph:chat-1") if e.type == "checkpoint.saved"])
        saver = LedgerSaver(ledger)
        saver.copy_thread("chat-1", "chat-2")
        forked = _chat_graph(saver).get_state({"configurable": {"thread_id": "chat-2"}})
        assert forked.values == again.get_state(config).values
        saver.delete_thread("chat-1")
        assert saver.get_tuple(config) is None  # type: ignore[arg-type]
        assert saver.get_tuple({"configurable": {"thread_id": "chat-2"}}) is not None
        # The log keeps the history the deletion hides.
        kinds = [e.type for e in ledger.events("langgraph:chat-1")]
        assert kinds[-1] == "checkpoints.cleared" and "checkpoint.saved" in kinds


def test_from_url_opens_and_closes_a_ledger(db_url: str) -> None:
    with LedgerSaver.from_url(db_url) as saver:
        graph = _chat_graph(saver)
        config = {"configurable": {"thread_id": "t"}}
        graph.invoke({"messages": [HumanMessage(content="hi", id="h0")]}, config)
    with LedgerSaver.from_url(db_url) as saver:
        assert [m.content for m in _chat_graph(saver).get_state(config).values["messages"]] == [
            "hi", "echo: hi"]


def _tail_items(entry: dict[str, Any]) -> list[Any]:
    saver = LedgerSaver.__new__(LedgerSaver)
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    saver.serde = JsonPlusSerializer()
    items = saver._decode(entry["tail"])
    assert isinstance(items, list)
    return items




def test_a_delta_is_never_built_on_a_stream_another_writer_moved(db_url: str) -> None:
    from langgraph.checkpoint.base import empty_checkpoint

    def put(saver: LedgerSaver, values: list[str], version: int) -> None:
        checkpoint = empty_checkpoint()
        checkpoint["channel_values"] = {"log": values}
        checkpoint["channel_versions"] = {"log": version}
        saver.put({"configurable": {"thread_id": "t", "checkpoint_ns": ""}}, checkpoint,
                  {"source": "loop", "step": version}, {"log": version})

    with Ledger.open(db_url, load_vocabulary=False) as ledger:
        first, second = LedgerSaver(ledger), LedgerSaver(ledger)
        put(first, ["a"], 1)
        put(first, ["a", "b"], 2)  # a tail: ["b"]
        put(second, ["x"], 3)  # another writer replaces the list
        put(first, ["a", "b", "c"], 4)  # first's cache is stale: stored whole
        entries = [e.data["values"][0] for e in ledger.events("langgraph:t")]
        assert ["tail" in entry for entry in entries] == [False, True, False, False]
        for saver in (first, second, LedgerSaver(ledger)):
            latest = saver.get_tuple({"configurable": {"thread_id": "t"}})
            assert latest is not None
            assert latest.checkpoint["channel_values"] == {"log": ["a", "b", "c"]}
        history = [t.checkpoint["channel_values"]["log"]
                   for t in LedgerSaver(ledger).list({"configurable": {"thread_id": "t"}})]
        assert sorted(history) == sorted([["a"], ["a", "b"], ["x"], ["a", "b", "c"]])
