"""A mixed log for replay tests: several scopes and sessions, interleaved, with a clock
the test moves, so live assemblies can be recorded at every position."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from ctxledger import Ledger

T0 = datetime(2025, 3, 1, 10, 0, tzinfo=UTC)

CARD = {"name": "Mara", "description": "A lighthouse keeper on Gull Point.",
        "personality": "Dry, patient, suspicious of strangers.",
        "scenario": "A storm has cut the island off for three days.",
        "first_mes": "*The door creaks.* Shut it behind you, the wind bites.",
        "mes_example": "{{user}}: Who keeps the light?\n{{char}}: I do. Always have.",
        "system_prompt": "Stay in character as {{char}}."}


class StepClock:
    """A clock the test sets; ``tick`` moves it forward."""

    def __init__(self, start: datetime = T0) -> None:
        self.now = start

    def tick(self, delta: timedelta = timedelta(minutes=7)) -> datetime:
        """Move forward by ``delta`` and return the new time."""
        self.now += delta
        return self.now

    def __call__(self) -> datetime:
        return self.now


def _msg(role: str, content: str, message_id: str | None = None) -> dict[str, Any]:
    data: dict[str, Any] = {"role": role, "content": content}
    if message_id is not None:
        data["message_id"] = message_id
    return {"type": "message.appended", "data": data}


def _set(key: str, value: Any) -> dict[str, Any]:
    return {"type": "setting.changed", "data": {"key": key, "value": value}}


def scenario_events() -> Iterator[tuple[str, dict[str, Any], timedelta]]:
    """(stream, event, time since the previous event) in append order."""
    minute = timedelta(minutes=7)
    day = timedelta(days=1)
    yield "scope:alice", _set("compression_level", "chat_dialogue"), minute
    for name, kind in (("mcp__github__create_issue", "mcp_tool"), ("Bash", "builtin"),
                       ("lint", "skill")):
        yield "scope:alice", {"type": "tool.registered",
                              "data": {"name": name, "tool_type": kind}}, minute
    yield "alice-1", {"type": "session.started", "data": {"scope": "alice"}}, minute
    yield "alice-1", {"type": "observation.recorded", "data": {
        "kind": "decision", "content": "Use the webhook for billing"}}, minute
    yield "bob-1", {"type": "session.started", "data": {"scope": "bob"}}, minute
    yield "alice-1", {"type": "tool.used",
                      "data": {"tool_name": "mcp__github__create_issue"}}, minute
    yield "bob-1", _msg("user", "unrelated noise"), minute
    yield "alice-1", {"type": "session.ended", "data": {"summary": "Billing webhook wired."}}, day
    yield "mover", {"type": "session.started", "data": {"scope": "alice"}}, minute
    yield "mover", {"type": "observation.recorded",
                    "data": {"kind": "finding", "content": "Retries double-charge"}}, minute
    yield "chat-1", {"type": "session.started", "data": {"scope": "alice"}}, minute
    yield "chat-1", {"type": "card.set", "data": CARD}, minute
    yield "mover", {"type": "tool.used", "data": {"tool_name": "lint"}}, minute
    yield "mover", {"type": "session.started", "data": {"scope": "bob"}}, minute
    yield "mover", {"type": "observation.recorded",
                    "data": {"kind": "change", "content": "Moved to bob's project"}}, minute
    lines = ["Who keeps the light?", "I do. Always have.", "Can I wait out the storm here?",
             "*She nods at the stove.* Sit.", "What happened to the last keeper?",
             "He went out in a storm like this one.", "Then we fix the lamp tonight.",
             "*A rare smile.* Then tonight we're machinists."]
    for index, text in enumerate(lines, start=1):
        role = "user" if index % 2 else "assistant"
        yield "chat-1", _msg(role, text, f"m{index}" if index != 4 else None), minute
        if index == 2:
            yield "bob-1", _msg("assistant", "more noise"), minute
            yield "alice-2", {"type": "session.started", "data": {"scope": "alice"}}, minute
            yield "alice-2", _msg("user", "Where were we on billing?"), minute
        if index == 3:
            yield "chat-1", {"type": "message.retracted", "data": {"message_id": "m3"}}, minute
            yield "chat-1", _msg("user", "May I wait out the storm here?", "m3b"), minute
        if index == 5:
            yield "chat-1", {"type": "history.summarized",
                             "data": {"through_message_id": "m2",
                                      "summary": "A stranger arrived; Mara keeps the light."}
                             }, minute
            yield "alice-2", {"type": "tool.used",
                              "data": {"tool_name": "mcp__github__create_issue"}}, minute
            yield "alice-2", {"type": "observation.recorded",
                              "data": {"kind": "reference", "content": "See RFC 12"}}, minute
        if index == 6:
            yield "chat-1", _set("context_limit", 120), minute
            yield "scope:alice", _set("compression_level", "aggressive"), minute
    yield "chat-1", {"type": "item.put", "data": {"item_id": "scene-1", "kind": "scene_plan",
                                                 "content": "The lamp is repaired."}}, minute
    yield "chat-1", _set("compression_level", "chat_only"), minute
    yield "chat-1", _msg("user", "Hand me the file."), minute


@dataclass
class Recorded:
    """Live assemblies made while the scenario was appended."""

    digests: dict[tuple[str, str, int], tuple[datetime, str]] = field(default_factory=dict)
    """(profile, session, position) -> (now, digest)."""
    unservable: dict[str, str] = field(default_factory=dict)
    """profile -> why some session could not be assembled with it."""


Observer = Callable[[Ledger, int, datetime], None]


def load_scenario(ledger: Ledger, clock: StepClock,
                  observe: Observer | None = None) -> list[int]:
    """Append the scenario; ``observe(ledger, position, now)`` runs after each event.

    The session that changes scope (a second ``session.started``, which the stream rules
    now refuse) is written as an older release wrote it: replay must still fold such logs.
    """
    from helpers.legacy import append_legacy

    positions = []
    started: set[str] = set()
    for stream, event, delta in scenario_events():
        clock.tick(delta)
        if event["type"] == "session.started" and stream in started:
            append_legacy(ledger, stream, [event])
            position = ledger.head()
        else:
            position = ledger.append(stream, event).positions[0]
        if event["type"] == "session.started":
            started.add(stream)
        positions.append(position)
        if observe is not None:
            observe(ledger, position, clock())
    return positions
