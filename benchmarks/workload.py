"""The benchmark's event mix: deterministic, seeded, the same for every leg and every peer.

About half messages, a quarter tool uses and a quarter setting changes, spread over
interleaved sessions (1,000 for the full 100k mix). Each session's first event is its
``session.started`` (about 1% of the full mix), so every stream is a well-formed session.
About 4% of the message draws are an assistant message calling a tool followed, as the
next event of the mix, by the tool result answering that call (its ``tool_call_id``), as a
chat API requires.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from typing import Any

DEFAULT_SEED = 20_261_122
FULL_EVENTS = 100_000
FULL_SESSIONS = 1_000
SCOPES = 10

# A small fixed vocabulary keeps message text realistic in length without a corpus.
_WORDS = (
    "the", "context", "window", "budget", "token", "model", "prompt", "session", "user",
    "assistant", "tool", "summary", "chapter", "scene", "card", "setting", "memory",
    "project", "agent", "plan", "draft", "review", "note", "result", "error", "retry",
    "cache", "index", "query", "answer", "question", "detail", "example", "reason",
    "change", "decision", "finding", "reference", "source", "entity", "fact", "trust",
    "snippet", "persona", "belief", "history", "message", "content",
)
_TOOLS = tuple(
    [f"builtin_{n}" for n in ("read", "write", "grep", "bash", "edit", "glob")]
    + [f"mcp_{s}_{n}" for s in ("github", "jira", "search") for n in ("get", "list", "put")]
    + [f"skill_{n}" for n in ("plan", "review", "test", "deploy", "lint", "format")]
)
# An application's own keys: no profile reads them, so any value is stored (a key that a
# profile reads takes only values its policy accepts).
_SETTINGS = ("tokenizer_name", "compression", "max_tokens", "temperature", "palette",
             "history_mode", "tool_window_days", "observations", "language", "style",
             "persona", "debug")


@dataclass(frozen=True, slots=True)
class MixEvent:
    """One event of the mix: the stream it goes to, its type and its data."""

    stream_id: str
    type: str
    data: dict[str, Any]

    def as_input(self) -> dict[str, Any]:
        """The ``{"type", "data"}`` mapping ``Ledger.append`` takes."""
        return {"type": self.type, "data": self.data}


def session_id(index: int) -> str:
    """The stream id of session number ``index``."""
    return f"session-{index:04d}"


def _message(rng: random.Random, stream: str, turn: int,
             room: int) -> list[dict[str, Any]]:
    """The session's next message, or (about 4%, when ``room`` holds two events) an
    assistant message calling a tool followed by the tool result that answers it, so a
    result always comes right after its call, in its stream and in the mix."""
    calls = rng.random() >= 0.96 and room >= 2
    words = rng.randint(12, 90)
    content = " ".join(rng.choice(_WORDS) for _ in range(words))
    if not calls:
        return [{"role": ("user", "assistant")[turn % 2], "content": content}]
    call_id = f"call-{stream}-{turn}"
    arguments = json.dumps({"query": " ".join(content.split()[:4])})
    return [{"role": "assistant", "content": None, "tool_calls": [
                {"id": call_id, "type": "function",
                 "function": {"name": _TOOLS[words % len(_TOOLS)], "arguments": arguments}}]},
            {"role": "tool", "content": content, "tool_call_id": call_id}]


def _tool_use(rng: random.Random) -> dict[str, Any]:
    name = rng.choice(_TOOLS)
    data: dict[str, Any] = {"tool_name": name, "ok": rng.random() < 0.93}
    if name.startswith("mcp_"):
        data["server_name"] = name.split("_")[1]
    return data


def _setting(rng: random.Random) -> dict[str, Any]:
    key = rng.choice(_SETTINGS)
    pick = rng.randrange(4)
    value: Any
    if pick == 0:
        value = rng.randint(0, 100_000)
    elif pick == 1:
        value = rng.choice(("cl100k_base", "chars4", "low", "medium", "high", "en", "fr"))
    elif pick == 2:
        value = rng.random() < 0.5
    else:
        value = {"level": rng.randint(1, 4), "enabled": rng.random() < 0.5}
    return {"key": key, "value": value}


def generate_mix(events: int = FULL_EVENTS, sessions: int | None = None,
                 seed: int = DEFAULT_SEED) -> list[MixEvent]:
    """``events`` events over ``sessions`` interleaved sessions, reproducible from ``seed``.

    ``sessions`` defaults to 1,000 for the full mix and scales down for small runs
    (one session per 100 events, at least one), so ``--quick`` keeps the same shape.
    """
    if events < 1:
        raise ValueError("the mix needs at least one event")
    count = sessions if sessions is not None else max(1, min(FULL_SESSIONS, events // 100))
    rng = random.Random(seed)
    turns = [0] * count
    started = [False] * count
    mix: list[MixEvent] = []
    while len(mix) < events:
        index = rng.randrange(count)
        stream = session_id(index)
        if not started[index]:
            started[index] = True
            mix.append(MixEvent(stream, "session.started",
                                {"scope": f"project-{index % SCOPES}",
                                 "title": f"benchmark session {index}"}))
            continue
        roll = rng.random()
        if roll < 0.5:
            for message in _message(rng, stream, turns[index], events - len(mix)):
                mix.append(MixEvent(stream, "message.appended", message))
                turns[index] += 1
        elif roll < 0.75:
            mix.append(MixEvent(stream, "tool.used", _tool_use(rng)))
        else:
            mix.append(MixEvent(stream, "setting.changed", _setting(rng)))
    return mix


def describe_mix(mix: list[MixEvent]) -> dict[str, int]:
    """Event counts by type plus the number of distinct streams (for the report)."""
    counts: dict[str, int] = {}
    for event in mix:
        counts[event.type] = counts.get(event.type, 0) + 1
    counts["streams"] = len({e.stream_id for e in mix})
    return dict(sorted(counts.items()))
