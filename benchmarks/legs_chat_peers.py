"""Chat-history peers: the sessions a user would pick instead of ctxledger's adapters.

Two pairs, each on the same seeded chat, on SQLite files in fresh directories:

- the OpenAI Agents SDK's ``SQLiteSession`` against ctxledger's ``LedgerSession``
  (``ctxledger.integrations.openai_agents``), through the SDK's async ``Session``
  protocol;
- LangChain's ``SQLChatMessageHistory`` (langchain-community) against
  ``LedgerChatMessageHistory`` (``ctxledger.integrations.langchain``).

A turn is what an agent loop does with its session: read the whole history
(``get_items()`` / ``.messages``), then store the user's message and the reply (one
``add_items`` / ``add_messages`` of two). The chat is grown untimed to a size, then
``TIMED_TURNS`` more turns are timed; the figure is the mean cost of one turn at that
size, in ms. Every contender runs at the same durability (WAL, ``synchronous=NORMAL``,
set on the peers' connections). ctxledger's side validates, hash-chains and updates every
inline projection in each turn's transaction; the peers store the message JSON only.
"""

from __future__ import annotations

import asyncio
import gc
import random
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from registry import AtMostTimesPeer, Comparison, Context, Measure, Reported, leg

from ctxledger import Ledger

SIZES = (100, 5_000)
QUICK_SIZES = (10, 50)
TIMED_TURNS = 20
QUICK_TIMED_TURNS = 5
FILL_CHUNK = 500
"""Turns stored per call while a chat is grown (untimed)."""
SEED = 20_261_127

_WORDS = ("the", "context", "window", "budget", "token", "model", "prompt", "session",
          "user", "assistant", "tool", "summary", "memory", "plan", "draft", "review",
          "note", "result", "error", "retry", "cache", "query", "answer", "question",
          "detail", "example", "reason", "change", "decision", "source", "history")


def chat_turns(count: int, seed: int = SEED) -> list[tuple[str, str]]:
    """``count`` (user text, reply text) pairs, the same for every contender."""
    rng = random.Random(seed)

    def text(low: int, high: int) -> str:
        return " ".join(rng.choice(_WORDS) for _ in range(rng.randint(low, high)))

    return [(text(8, 40), text(20, 120)) for _ in range(count)]


# -- the OpenAI Agents SDK pair --------------------------------------------------------------

def agent_items(turn: int, user: str, reply: str) -> list[dict[str, Any]]:
    """A turn's items as a Runner stores them: the user's input, the model's message."""
    return [{"role": "user", "content": user},
            {"type": "message", "id": f"msg_{turn:06d}", "role": "assistant",
             "status": "completed",
             "content": [{"type": "output_text", "text": reply, "annotations": []}]}]


async def _session_turns(session: Any, items: Sequence[list[dict[str, Any]]]) -> int:
    seen = 0
    for turn in items:
        seen = len(await session.get_items())
        await session.add_items(turn)
    return seen


async def _session_fill(session: Any, items: Sequence[list[dict[str, Any]]]) -> None:
    for start in range(0, len(items), FILL_CHUNK):
        await session.add_items([i for turn in items[start:start + FILL_CHUNK] for i in turn])


def ledger_session_turns(ledger: Ledger, turns: Sequence[tuple[str, str]]) -> int:
    """Run ``turns`` through a ``LedgerSession`` (get_items, then add_items of two);
    returns the events written (the profile's scenario)."""
    from ctxledger.integrations.openai_agents import LedgerSession

    session = LedgerSession(ledger, "chat")
    items = [agent_items(k, u, r) for k, (u, r) in enumerate(turns)]
    asyncio.run(_session_turns(session, items))
    return 2 * len(turns)


def _agents_turn_ms(make: Callable[[Path], tuple[Any, Callable[[], None]]], directory: Path,
                    turns: Sequence[tuple[str, str]], size: int, timed_turns: int) -> float:
    """Grow a chat to ``size - timed_turns`` turns, then the mean ms of the next ones."""
    items = [agent_items(k, u, r) for k, (u, r) in enumerate(turns[:size])]
    grown = size - timed_turns
    session, close = make(directory)
    try:
        asyncio.run(_session_fill(session, items[:grown]))
        gc.collect()
        start = time.perf_counter()
        seen = asyncio.run(_session_turns(session, items[grown:]))
        seconds = time.perf_counter() - start
        if seen != 2 * (size - 1):
            raise RuntimeError(f"{type(session).__name__} read {seen} items at the last "
                               f"turn, expected {2 * (size - 1)}")
        if len(asyncio.run(session.get_items())) != 2 * size:
            raise RuntimeError(f"{type(session).__name__} did not keep every item")
    finally:
        close()
    return 1000 * seconds / timed_turns


def _ledger_session(directory: Path) -> tuple[Any, Callable[[], None]]:
    from ctxledger.integrations.openai_agents import LedgerSession

    ledger = Ledger.open(f"sqlite:///{directory / 'ledger.db'}")
    return LedgerSession(ledger, "chat"), ledger.close


def _sdk_session(directory: Path) -> tuple[Any, Callable[[], None]]:
    from agents.memory import SQLiteSession

    class SameDurability(SQLiteSession):
        """The SDK's session with ctxledger's durability: it sets WAL itself, and
        ``synchronous=NORMAL`` here (its default FULL syncs every commit)."""

        @staticmethod
        def _configure_connection(conn: Any) -> None:
            SQLiteSession._configure_connection(conn)
            conn.execute("PRAGMA synchronous=NORMAL")

    session = SameDurability("chat", directory / "agents.db")
    return session, session.close


# -- the LangChain pair -------------------------------------------------------------------------

def _lc_turn(user: str, reply: str) -> list[Any]:
    from langchain_core.messages import AIMessage, HumanMessage

    return [HumanMessage(content=user), AIMessage(content=reply)]


def _history_turns(history: Any, messages: Sequence[list[Any]]) -> int:
    seen = 0
    for turn in messages:
        seen = len(history.messages)
        history.add_messages(turn)
    return seen


def _langchain_turn_ms(make: Callable[[Path], tuple[Any, Callable[[], None]]],
                       directory: Path, turns: Sequence[tuple[str, str]], size: int,
                       timed_turns: int) -> float:
    """As ``_agents_turn_ms``, through LangChain's ``BaseChatMessageHistory``."""
    messages = [_lc_turn(u, r) for u, r in turns[:size]]
    grown = size - timed_turns
    history, close = make(directory)
    try:
        for start in range(0, grown, FILL_CHUNK):
            history.add_messages([m for turn in messages[start:min(grown, start + FILL_CHUNK)]
                                  for m in turn])
        gc.collect()
        start_time = time.perf_counter()
        seen = _history_turns(history, messages[grown:])
        seconds = time.perf_counter() - start_time
        if seen != 2 * (size - 1) or len(history.messages) != 2 * size:
            raise RuntimeError(f"{type(history).__name__} did not keep every message")
    finally:
        close()
    return 1000 * seconds / timed_turns


def _ledger_history(directory: Path) -> tuple[Any, Callable[[], None]]:
    from ctxledger.integrations.langchain import LedgerChatMessageHistory

    ledger = Ledger.open(f"sqlite:///{directory / 'ledger.db'}")
    return LedgerChatMessageHistory(ledger, "chat"), ledger.close


def _sql_history(directory: Path) -> tuple[Any, Callable[[], None]]:
    import warnings

    import sqlalchemy as sa
    from langchain_community.chat_message_histories import SQLChatMessageHistory

    engine = sa.create_engine(f"sqlite:///{directory / 'lc.db'}")

    @sa.event.listens_for(engine, "connect")
    def same_durability(dbapi_conn: Any, _record: Any) -> None:
        # ctxledger's settings (SQLAlchemy's SQLite default is a rollback journal).
        dbapi_conn.execute("PRAGMA journal_mode=WAL")
        dbapi_conn.execute("PRAGMA synchronous=NORMAL")

    with warnings.catch_warnings():  # its deprecation notes
        warnings.simplefilter("ignore")
        history = SQLChatMessageHistory("chat", connection=engine)
    return history, engine.dispose


def _peers_missing() -> list[str]:
    missing = []
    for module, dist in (("agents", "openai-agents"),
                         ("langchain_community", "langchain-community")):
        try:
            __import__(module)
        except ImportError:
            missing.append(dist)
    return missing


@leg("chat_peers", "chat turns: the Agents SDK's and LangChain's SQLite sessions")
def chat_peers(ctx: Context) -> list[Comparison]:
    """Per-turn cost of ctxledger's adapters against the sessions they replace."""
    missing = _peers_missing()
    if missing:
        print(f"  chat_peers skipped: {', '.join(missing)} not installed (the bench extra)")
        return []
    sizes = QUICK_SIZES if ctx.settings.quick else SIZES
    timed_turns = QUICK_TIMED_TURNS if ctx.settings.quick else TIMED_TURNS
    turns = chat_turns(max(sizes))
    pairs = (
        ("Agents SDK", "LedgerSession", "SQLiteSession", _agents_turn_ms,
         _ledger_session, _sdk_session),
        ("LangChain", "LedgerChatMessageHistory", "SQLChatMessageHistory",
         _langchain_turn_ms, _ledger_history, _sql_history),
    )
    rows: list[Comparison] = []
    for family, ours_name, peer_name, measure, ours_make, peer_make in pairs:
        for size in sizes:
            got: dict[str, list[float]] = {"ours": [], "peer": []}
            for round_index in range(ctx.settings.rounds):
                order = [("ours", ours_make), ("peer", peer_make)]
                if round_index % 2:
                    order.reverse()
                for who, make in order:
                    with ctx.fresh_dir(f"chat-{who}-{size}") as directory:
                        got[who].append(measure(make, directory, turns, size, timed_turns))
            note = (f"mean of {timed_turns} turns (read the whole history, store two"
                    " messages) after the chat was grown untimed; ctxledger validates,"
                    " chains and projects each turn")
            rows.append(Comparison(
                "chat_peers", f"{family} turn at {size:,} turns: {ours_name} vs the peer",
                Measure.median_of(got["ours"], "ms"), peer_name,
                Measure.median_of(got["peer"], "ms"),
                # ctxledger does more per turn, and must still be as fast on a long chat.
                AtMostTimesPeer(1.0) if size == max(sizes) else Reported(), note))
    return rows
