"""The ``lorebook`` leg: a card chat whose card carries a 500-entry lorebook, re-assembled
after one new message, with 10,000 messages of history against 100.

The card's ``character_book`` has 500 entries of 3 keys each (seeded invented names, so
keys never collide with the chat's common words), scan depth 4 and a token budget; one
message in three names one or two of the keys, so entries come and go as the window
moves. Each session (``context_limit`` 8,000, compression none, as a chat app windows the
history) is written in batches, opened in a fresh ``Ledger`` and assembled once (the
warm-up). Then turn by turn, the sizes interleaved so background load hits them alike,
one user message is appended and the session re-assembled (``assemble(session, "card",
now=...)``); each re-assembly is timed.

Rows: the median re-assembly at 10,000 messages against 100 (<= 1.3x), and the engine
alone: ``activate`` over a window whose newest message is new (the book's plan and the
older messages are memo hits), which is what a re-assembly adds per book (<= 5 ms).
"""

from __future__ import annotations

import random
import statistics
import time
from typing import Any

from assembly_workload import Batch, ScopeHistory, _text
from legs_append import ledger_url
from legs_assemble import NOW, StepClock, write
from registry import AtMost, AtMostTimesPeer, Comparison, Context, Measure, leg
from workload import DEFAULT_SEED

from ctxledger import Ledger
from ctxledger.assembler.lorebook import ScanMessage, activate, parse_book
from ctxledger.assembler.memo import CanonicalMemo

FULL_MESSAGES = (100, 10_000)
QUICK_MESSAGES = (100, 1_000)
FULL_TURNS = 21
QUICK_TURNS = 3
"""Re-assemblies per size (each after one new message)."""
ENTRIES, KEYS_PER_ENTRY = 500, 3
SCAN_DEPTH, TOKEN_BUDGET = 4, 1_500
CONTEXT_LIMIT = 8_000
BATCH = 500
"""Messages per append while the history is written."""
SESSION = "chat-lore"
USER, CHAR = "Alex", "Mira"
TARGET = AtMostTimesPeer(1.3)
SCAN_CEILING = AtMost(5, "ms")
ENGINE_REPEATS = 51

_SYLLABLES = ("ka", "ren", "dor", "mi", "thal", "vos", "ur", "es", "lin", "gar", "oth",
              "bel", "qua", "zir", "nim", "ae", "tor", "wyn", "sel", "fen", "drak", "ost")


def lore_keys(rng: random.Random, count: int) -> list[str]:
    """``count`` distinct invented names of three or four syllables."""
    seen: dict[str, None] = {}
    while len(seen) < count:
        name = "".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(3, 4)))
        seen.setdefault(name.capitalize())
    return list(seen)


def character_book(seed: int = DEFAULT_SEED) -> dict[str, Any]:
    """The card's lorebook: ``ENTRIES`` entries of ``KEYS_PER_ENTRY`` keys, 30-80 words of
    content each, every tenth selective and every fiftieth constant."""
    rng = random.Random(seed * 53 + 5)
    keys = lore_keys(rng, ENTRIES * KEYS_PER_ENTRY)
    entries = []
    for index in range(ENTRIES):
        own = keys[index * KEYS_PER_ENTRY:(index + 1) * KEYS_PER_ENTRY]
        entry: dict[str, Any] = {
            "id": index, "keys": own, "content": f"{own[0]}: {_text(rng, 30, 80)}",
            "name": own[0], "enabled": True, "insertion_order": rng.randint(0, 200),
            "priority": rng.randint(0, 10), "case_sensitive": False,
            "constant": index % 50 == 0, "extensions": {}}
        if index % 10 == 5:
            entry["selective"] = True
            entry["secondary_keys"] = ["storm", "lantern"]
        entries.append(entry)
    return {"name": "Gull Point", "scan_depth": SCAN_DEPTH, "token_budget": TOKEN_BUDGET,
            "recursive_scanning": False, "extensions": {}, "entries": entries}


class Chat:
    """The seeded messages of the chat: user and character in turn, one in three naming
    one or two lorebook keys."""

    def __init__(self, keys: list[str], seed: int) -> None:
        self.rng = random.Random(seed)
        self.keys = keys
        self.made = 0

    def message(self) -> dict[str, Any]:
        """The next message's ``message.appended`` event."""
        rng, number = self.rng, self.made
        self.made += 1
        text = _text(rng, 20, 120)
        if rng.random() < 1 / 3:
            named = " and ".join(rng.choice(self.keys) for _ in range(rng.randint(1, 2)))
            text = f"{text} {named} again."
        role, name = ("user", USER) if number % 2 == 0 else ("assistant", CHAR)
        return {"type": "message.appended", "data": {
            "message_id": f"m{number:06d}", "role": role, "content": text, "name": name}}


def setup_events(book: dict[str, Any]) -> list[dict[str, Any]]:
    """The session's opening: started, the card with its book, the settings."""
    def setting(key: str, value: Any) -> dict[str, Any]:
        return {"type": "setting.changed", "data": {"key": key, "value": value}}

    card = {"name": CHAR, "description": "{{char}} keeps the lighthouse at Gull Point.",
            "personality": "patient, dry humour, curious",
            "scenario": "A stormy evening in the lighthouse kitchen.",
            "character_book": book}
    return [
        {"type": "session.started", "data": {"scope": "lore", "title": "Lorebook"}},
        {"type": "card.set", "data": card},
        setting("user_name", USER),
        setting("compression_level", "none"),
        setting("context_limit", CONTEXT_LIMIT),
    ]


def _history(book: dict[str, Any], keys: list[str], messages: int
             ) -> tuple[ScopeHistory, Chat]:
    chat = Chat(keys, DEFAULT_SEED * 17 + 3)
    batches = [Batch(SESSION, setup_events(book))]
    for start in range(0, messages, BATCH):
        batches.append(Batch(SESSION, [chat.message()
                                       for _ in range(min(BATCH, messages - start))]))
    return ScopeHistory("card", SESSION, "lore", batches), chat


def engine_scan_ms(book_raw: dict[str, Any], keys: list[str]) -> tuple[Measure, str]:
    """``activate`` with a warm memo over a window whose newest message is new, and what
    reading the book costs (cold, and with the memo)."""
    memo = CanonicalMemo()
    start = time.perf_counter()
    book = parse_book("card", book_raw)
    parse_cold = (time.perf_counter() - start) * 1e3
    parse_book("card", book_raw, intern=memo.intern)
    start = time.perf_counter()
    parse_book("card", book_raw, intern=memo.intern)
    parse_warm = (time.perf_counter() - start) * 1e3
    chat = Chat(keys, DEFAULT_SEED * 23 + 1)
    window = [ScanMessage(str(event["data"]["message_id"]), str(event["data"]["content"]))
              for event in (chat.message() for _ in range(SCAN_DEPTH))]
    activate(book, window, scan_depth=SCAN_DEPTH, intern=memo.intern)
    runs = []
    for _ in range(ENGINE_REPEATS):
        event = chat.message()
        window = [*window[1:], ScanMessage(str(event["data"]["message_id"]),
                                           str(event["data"]["content"]))]
        start = time.perf_counter()
        activate(book, window, scan_depth=SCAN_DEPTH, intern=memo.intern)
        runs.append((time.perf_counter() - start) * 1e3)
        memo.assembled()
    note = (f"reading the book: {parse_cold:.2f} ms, {parse_warm:.2f} ms with the memo "
            f"(its canonical JSON and hash)")
    return Measure(statistics.median(runs), "ms", tuple(runs)), note


@leg("lorebook", "card re-assembly with a 500-entry lorebook after one new message, "
                 "10k vs 100 messages")
def lorebook(ctx: Context) -> list[Comparison]:
    """Re-assembly after one new message at each history size, and the engine alone."""
    sizes = QUICK_MESSAGES if ctx.settings.quick else FULL_MESSAGES
    turns = QUICK_TURNS if ctx.settings.quick else FULL_TURNS
    book = character_book()
    keys = [key for entry in book["entries"] for key in entry["keys"]]
    ledgers: list[Ledger] = []
    chats: list[Chat] = []
    times: dict[int, list[float]] = {size: [] for size in sizes}
    context: dict[int, tuple[int, int]] = {}
    with ctx.fresh_dir("lorebook") as directory:
        try:
            for size in sizes:
                folder = directory / f"n{size}"
                folder.mkdir()
                history, chat = _history(book, keys, size)
                write(ledger_url(folder), history)
                ledger = Ledger.open(ledger_url(folder), clock=StepClock(NOW))
                ledger.assemble(SESSION, "card", now=NOW)
                ledgers.append(ledger)
                chats.append(chat)
            for _ in range(turns):
                for size, ledger, chat in zip(sizes, ledgers, chats, strict=True):
                    ledger.append(SESSION, chat.message())
                    start = time.perf_counter()
                    assembly = ledger.assemble(SESSION, "card", now=NOW)
                    times[size].append((time.perf_counter() - start) * 1e3)
                    context[size] = (len(assembly.messages), assembly.tokens.total)
        finally:
            for ledger in ledgers:
                ledger.close()
    small, big = sizes
    measure = {size: Measure(statistics.median(values), "ms", tuple(values))
               for size, values in times.items()}
    scan, parse_note = engine_scan_ms(book, keys)
    note = (f"card with a {ENTRIES}-entry character_book ({KEYS_PER_ENTRY} keys each, scan "
            f"depth {SCAN_DEPTH}, token budget {TOKEN_BUDGET:,}), context_limit "
            f"{CONTEXT_LIMIT:,}, compression none; median of {turns} re-assemblies per size "
            f"after one new message, sizes interleaved; context "
            + ", ".join(f"{n:,} msgs: {m:,} messages / {t:,} tokens"
                        for n, (m, t) in context.items())
            + f"; engine alone: activate() with one new message in a window of "
              f"{SCAN_DEPTH}, median of {ENGINE_REPEATS}; {parse_note}")
    return [
        Comparison("lorebook", f"card re-assembly with a lorebook after one new message, "
                   f"{big:,} vs {small:,} messages", measure[big], f"{small:,} messages",
                   measure[small], TARGET, note),
        Comparison("lorebook", f"lorebook activate() after one new message "
                   f"({ENTRIES} entries)", scan, None, None, SCAN_CEILING, note),
    ]
