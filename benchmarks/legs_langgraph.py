"""LangGraph checkpointer leg: ``LedgerSaver`` against LangGraph's ``SqliteSaver``.

The same chat graph runs ``checkpoint_steps`` steps (2,000) with each checkpointer on a
SQLite file: ``StateGraph(MessagesState)`` with one node that returns the scripted
model's messages of the turn (the turn loop's seeded script: 20-120 word messages, one
turn in three calling one or two tools, with their results). A step is one ``invoke``
with the user's message, ``durability="sync"`` so every checkpoint is written before the
step returns (two checkpoints per step: the input and the node's update, and the node's
writes).

- database size: the file after the last step (WAL checkpointed into it, both alike);
- put latency: every ``put`` of the run timed where LangGraph calls it; the target row
  is the mean over the whole run, the median of the last 100 steps' puts is reported.

``SqliteSaver`` stores every channel's whole value at each checkpoint (the whole message
list at every step); ``LedgerSaver`` stores what the step added.
"""

from __future__ import annotations

import gc
import sqlite3
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from legs_append import ledger_url
from legs_turnloop import db_bytes, langgraph_available, script
from registry import Comparison, Context, Measure, Reported, TimesLessThanPeer, leg

from ctxledger import Ledger

SMALLER = TimesLessThanPeer(100, "smaller")
FASTER = TimesLessThanPeer(5, "faster")
TAIL = 100
"""The reported median covers the puts of the last this many steps."""


def _graph(saver: Any, steps: int) -> tuple[Any, list[Any]]:
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
    from langgraph.graph import END, START, MessagesState, StateGraph

    turns = script(steps)
    inputs = [HumanMessage(turn.user, id=f"u{n:05d}") for n, turn in enumerate(turns)]

    def model(state: MessagesState) -> dict[str, Any]:
        n = (len([m for m in state["messages"] if m.type == "human"])) - 1
        turn = turns[n]
        out: list[Any] = []
        if turn.tools:
            out.append(AIMessage("", id=f"c{n:05d}", tool_calls=[
                {"name": step.name, "args": {"query": step.arguments}, "id": step.call_id}
                for step in turn.tools]))
            out.extend(ToolMessage(step.result, tool_call_id=step.call_id,
                                   id=f"t{n:05d}_{k}") for k, step in enumerate(turn.tools))
        out.append(AIMessage(turn.reply, id=f"a{n:05d}"))
        return {"messages": out}

    graph = StateGraph(MessagesState)
    graph.add_node("model", model)
    graph.add_edge(START, "model")
    graph.add_edge("model", END)
    return graph.compile(checkpointer=saver), inputs


def _run(saver: Any, steps: int) -> tuple[list[float], list[int], int]:
    """Run the chat graph; every put's time (ms), the puts of each step, the messages."""
    times: list[float] = []
    put: Callable[..., Any] = saver.put

    def timed(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        result = put(*args, **kwargs)
        times.append((time.perf_counter() - start) * 1e3)
        return result

    saver.put = timed
    graph, inputs = _graph(saver, steps)
    config = {"configurable": {"thread_id": "chat"}}
    per_step = []
    gc.collect()
    for message in inputs:
        before = len(times)
        graph.invoke({"messages": [message]}, config, durability="sync")
        per_step.append(len(times) - before)
    count = len(graph.get_state(config).values["messages"])
    return times, per_step, count


def _checkpointed_size(path: Path) -> int:
    """The file's size once its WAL is folded in (done alike for both contenders)."""
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return db_bytes(path)


@leg("langgraph", "LangGraph checkpointer: LedgerSaver vs SqliteSaver, a chat graph's "
                  "database size and put latency")
def langgraph_checkpointer(ctx: Context) -> list[Comparison]:
    """Size and put latency after ``checkpoint_steps`` steps of the same chat graph."""
    from ctxledger.integrations.langgraph import LedgerSaver

    why_not = langgraph_available()
    if why_not is not None:
        raise RuntimeError(why_not)
    from langgraph.checkpoint.sqlite import SqliteSaver

    steps = ctx.settings.checkpoint_steps
    with ctx.fresh_dir("langgraph-ours") as directory:
        ledger = Ledger.open(ledger_url(directory), load_vocabulary=False)
        try:
            ours, ours_steps, ours_count = _run(LedgerSaver(ledger), steps)
        finally:
            ledger.close()
        ours_size = _checkpointed_size(directory / "ledger.db")
    with ctx.fresh_dir("langgraph-peer") as directory:
        path = directory / "langgraph.db"
        conn = sqlite3.connect(path, check_same_thread=False)
        # ctxledger's SQLite settings (store/sql_engine.py), as the turn loop's peer has them.
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        try:
            peer, peer_steps, peer_count = _run(SqliteSaver(conn), steps)
        finally:
            conn.close()
        peer_size = _checkpointed_size(path)
    if ours_count != peer_count:
        raise RuntimeError(f"the graphs ended with {ours_count} and {peer_count} messages")
    tail_ours = ours[len(ours) - sum(ours_steps[-TAIL:]):]
    tail_peer = peer[len(peer) - sum(peer_steps[-TAIL:]):]
    peer_name = f"SqliteSaver ({len(peer):,} puts)"
    note = f"{steps:,} steps, {ours_count:,} messages"
    return [
        Comparison("langgraph", f"database size after {steps:,} steps of a chat graph",
                   Measure(ours_size / 1e6, "MB"), peer_name, Measure(peer_size / 1e6, "MB"),
                   SMALLER, note),
        Comparison("langgraph", f"put latency, mean over the {steps:,} steps",
                   Measure(statistics.fmean(ours), "ms", tuple(ours[-20:])), peer_name,
                   Measure(statistics.fmean(peer), "ms", tuple(peer[-20:])), FASTER, note),
        Comparison("langgraph", f"put latency, median of the last {TAIL} steps",
                   Measure(statistics.median(tail_ours), "ms"), peer_name,
                   Measure(statistics.median(tail_peer), "ms"), Reported(), note),
    ]
