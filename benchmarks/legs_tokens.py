"""Tokens leg: counts for today's models and the cost of recording what was billed.

- ``o200k total``: a tool-calling chat assembled for ``gpt-4o`` (``o200k_base``) at every
  ``context_limit`` from 40 tokens to past the whole chat, step 3; at each, ``tokens.total``
  against an independent count of the messages sent (``bpe-openai``'s Rust BPE, OpenAI's
  documented 3 per message, 1 per name, 3 to prime the reply, the tool calls' names and
  arguments): the number of limits where they differ must be 0.
- ``usage.reported``: a chat loop (append the user's message, assemble, record the
  assembly, append the reply); ``Ledger.report_usage`` after each turn, timed apart, must
  cost at most 5% of a turn.
- ``o200k_base`` against ``cl100k_base``: the same texts counted by fresh counters (no
  memo), reported as a ratio of times.
"""

from __future__ import annotations

import json
import random
import time
from typing import Any

from bpe_openai import _bindings as rust_bpe
from legs_append import ledger_url
from registry import AtMostTimesPeer, Comparison, Context, Exactly, Measure, Reported, leg

from ctxledger import Ledger
from ctxledger.assembler.tokens import TokenCounter

FULL_TURNS, QUICK_TURNS = 400, 60
FULL_TEXTS, QUICK_TEXTS = 20_000, 2_000
CARD = {"name": "Mara", "system_prompt": "You are Mara, a ship's captain.",
        "description": "A weathered captain who speaks in short sentences."}


def _tool_chat(turns: int) -> list[dict[str, Any]]:
    def call(call_id: str, name: str, city: str) -> dict[str, Any]:
        return {"id": call_id, "type": "function",
                "function": {"name": name, "arguments": json.dumps({"city": city})}}

    out: list[dict[str, Any]] = []
    for t in range(turns):
        out += [{"message_id": f"u{t}", "role": "user", "content": f"Weather in port {t}?"},
                {"message_id": f"c{t}", "role": "assistant", "content": None,
                 "tool_calls": [call(f"w{t}", "get_weather", f"port {t}"),
                                call(f"t{t}", "get_time", f"port {t}")]},
                {"message_id": f"rw{t}", "role": "tool", "tool_call_id": f"w{t}",
                 "content": f"{10 + t}C and clear skies 🌤️ over port {t}"},
                {"message_id": f"rt{t}", "role": "tool", "tool_call_id": f"t{t}",
                 "content": f"{t % 12 + 1}:05 local time"},
                {"message_id": f"a{t}", "role": "assistant", "name": "Mara",
                 "content": f"Port {t}: {10 + t}C, clear, {t % 12 + 1}:05."}]
    return out


def _independent_total(messages: list[dict[str, Any]]) -> int:
    bpe = rust_bpe.tokenizer_for_encoding("o200k_base")
    total = 3 if messages else 0
    for m in messages:
        total += 3 + bpe.count(m["role"])
        if isinstance(m.get("content"), str):
            total += bpe.count(m["content"])
        if m.get("name"):
            total += bpe.count(m["name"]) + 1
        for c in m.get("tool_calls") or []:
            total += 3 + bpe.count(c["function"]["name"]) + bpe.count(c["function"]["arguments"])
    return total


def _o200k_mismatches(ctx: Context) -> tuple[int, int]:
    with ctx.fresh_dir("tokens-o200k") as directory, \
            Ledger.open(ledger_url(directory)) as ledger:
        ledger.append("chat", [{"type": "session.started", "data": {"scope": "s"}},
                               {"type": "card.set", "data": CARD},
                               {"type": "setting.changed",
                                "data": {"key": "model", "value": "gpt-4o"}},
                               *({"type": "message.appended", "data": m}
                                 for m in _tool_chat(4))])
        full = ledger.assemble("chat", "card")
        limits = range(40, full.tokens.total + 20, 3)
        bad = 0
        for limit in limits:
            ledger.append("chat", {"type": "setting.changed",
                                   "data": {"key": "context_limit", "value": limit}})
            assembly = ledger.assemble("chat", "card")
            sent = [m.model_dump(mode="json", exclude={"item", "sections", "tokens"},
                                 exclude_none=True) for m in assembly.messages]
            bad += assembly.tokens.total != _independent_total(sent)
        return bad, len(limits)


def _turn_costs(ctx: Context, turns: int) -> tuple[float, float]:
    """Seconds per turn, and per ``report_usage`` after it (medians)."""
    turn_times: list[float] = []
    report_times: list[float] = []
    with ctx.fresh_dir("tokens-usage") as directory, \
            Ledger.open(ledger_url(directory)) as ledger:
        ledger.append("s", [{"type": "session.started", "data": {"scope": "p"}},
                            {"type": "card.set", "data": CARD},
                            {"type": "setting.changed",
                             "data": {"key": "model", "value": "gpt-4o"}}])
        for t in range(turns):
            start = time.perf_counter()
            ledger.append("s", {"type": "message.appended",
                                "data": {"role": "user", "content": f"turn {t}: where next?"}})
            assembly = ledger.assemble("s", "card")
            ledger.record_assembly("s", assembly)
            ledger.append("s", {"type": "message.appended",
                                "data": {"role": "assistant", "content": f"Port {t}, aye."}})
            middle = time.perf_counter()
            ledger.report_usage("s", model="gpt-4o", input_tokens=assembly.tokens.total,
                                output_tokens=5, cached_tokens=0, cost=0.0001,
                                assembly=assembly)
            end = time.perf_counter()
            turn_times.append(middle - start)
            report_times.append(end - middle)
    turn_times.sort()
    report_times.sort()
    return turn_times[len(turn_times) // 2], report_times[len(report_times) // 2]


def _texts(count: int) -> list[str]:
    rng = random.Random(7)
    words = ["harbor", "captain", "storm", "🌊", "naïve", "日本", "tool_call", "{\"city\":",
             "1234", "Ahoy!", "déjà", "ship's", "\n", "  ", "get_weather", "Пристань"]
    return [" ".join(rng.choice(words) for _ in range(rng.randint(5, 60))) + f" #{n}"
            for n in range(count)]


def _count_time(encoding: str, texts: list[str]) -> float:
    counter = TokenCounter(encoding)
    counter.count("warm up")  # load the vocabulary outside the timing
    start = time.perf_counter()
    for text in texts:
        counter.count(text)
    return time.perf_counter() - start


@leg("tokens", "o200k totals, the cost of usage.reported, o200k vs cl100k counting")
def tokens(ctx: Context) -> list[Comparison]:
    """Counts for today's models and the cost of recording the provider's usage."""
    quick = ctx.settings.quick
    bad, limits = _o200k_mismatches(ctx)
    turn, report = _turn_costs(ctx, QUICK_TURNS if quick else FULL_TURNS)
    texts = _texts(QUICK_TEXTS if quick else FULL_TEXTS)
    cl100k = _count_time("cl100k_base", texts)
    o200k = _count_time("o200k_base", texts)
    return [
        Comparison("tokens", f"o200k tokens.total != independent count ({limits} limits)",
                   Measure(bad, "limits", (bad,)), None, None, Exactly(0, "limits"),
                   "gpt-4o, a 4-turn tool-calling chat, limits 40..total+20 step 3; "
                   "bpe-openai's Rust BPE with OpenAI's per-message overheads"),
        Comparison("tokens", "usage.reported per turn vs the turn",
                   Measure(report * 1000, "ms", (report * 1000,)), "turn",
                   Measure(turn * 1000, "ms", (turn * 1000,)), AtMostTimesPeer(0.05),
                   "medians; a turn: append, assemble, record_assembly, append"),
        Comparison("tokens", f"o200k_base counting vs cl100k_base ({len(texts):,} texts)",
                   Measure(o200k, "s", (o200k,)), "cl100k_base",
                   Measure(cl100k, "s", (cl100k,)), Reported(),
                   "fresh counters, no memo; same texts"),
    ]
