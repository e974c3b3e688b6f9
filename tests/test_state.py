"""``ledger.state()``: the session's projection state as stable, JSON-ready data."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from freezegun import freeze_time

from ctxledger import Ledger, LedgerError

T0 = datetime(2026, 7, 1, 10, 0, tzinfo=UTC)


def ev(type_: str, **data: Any) -> dict[str, Any]:
    return {"type": type_, "data": data}


def all_keys_sorted(value: Any) -> bool:
    if isinstance(value, dict):
        return list(value) == sorted(value) and all(all_keys_sorted(v) for v in value.values())
    if isinstance(value, list):
        return all(all_keys_sorted(v) for v in value)
    return True


def test_state_of_a_session(ledger: Ledger) -> None:
    with freeze_time(T0) as frozen:
        ledger.append("scope:proj", [ev("setting.changed", key="z", value={"b": 1, "a": [2]}),
                                     ev("setting.changed", key="level", value="chat_only")])
        ledger.append("s", [ev("session.started", scope="proj", title="Plan", agent="planner"),
                            ev("message.appended", role="user", content="hi", message_id="m1"),
                            ev("message.appended", role="assistant", content="hello"),
                            ev("message.appended", role="user", content="oops",
                               message_id="m2"),
                            ev("message.retracted", message_id="m2"),
                            ev("setting.changed", key="level", value="aggressive"),
                            ev("chapter.moved", chapter=4, scene="dock"),
                            ev("document.put", doc_id="state", kind="plan_state",
                               content="# Phase 2"),
                            ev("document.put", doc_id="deps", kind="dep_graph",
                               content={"b": ["a"], "a": []})])
        frozen.tick(timedelta(hours=1))
        ledger.append("s", ev("tool.used", tool_name="grep"))
        state = ledger.state("s")
    assert state == {
        "agent": "planner",
        "chapter": 4,
        "documents": [  # in compact form (tests/test_agent_scoping.py)
            {"content": {"has_cycles": False, "top_imported": ["a (1)"], "total_edges": 1,
                         "total_modules": 2}, "doc_id": "deps", "kind": "dep_graph"},
            {"content": {"blockers": [], "decisions": [], "last_activity": None,
                         "phase": "2", "progress": None, "status": None},
             "doc_id": "state", "kind": "plan_state"},
        ],
        "ended_at": None,
        "last_activity": "2026-07-01T11:00:00.000000Z",
        "messages": {"assistant": 1, "developer": 0, "retracted": 1, "system": 0, "tool": 0,
                     "total": 2, "user": 1},
        "position": ledger.head(),
        "scene": "dock",
        "scope": "proj",
        "session": "s",
        "settings": {"level": "aggressive", "z": {"a": [2], "b": 1}},
        "started_at": "2026-07-01T10:00:00.000000Z",
        "title": "Plan",
        "top_tools": [{"last_used": "2026-07-01T11:00:00.000000Z", "lifetime_uses": 1,
                       "name": "grep", "server_name": None, "uses": 1}],
    }
    assert all_keys_sorted(state)
    assert json.loads(json.dumps(state)) == state


def test_top_tools_rank_by_seven_day_count_then_name(ledger: Ledger) -> None:
    uses = {"old": 9, "b": 3, "a": 3, "c": 5, "d": 1, "e": 1, "f": 2}
    with freeze_time(T0) as frozen:
        ledger.append("s", ev("session.started", scope="p"))
        ledger.append("s", [ev("tool.used", tool_name="old") for _ in range(uses["old"])])
        frozen.tick(timedelta(days=8))  # "old" is now outside the 7-day window
        for name in ("b", "a", "c", "d", "e", "f"):
            ledger.append("s", [ev("tool.used", tool_name=name) for _ in range(uses[name])])
            frozen.tick(timedelta(minutes=1))
        state = ledger.state("s")
        frozen.tick(timedelta(days=30))
        later = ledger.state("s")
    assert [(t["name"], t["uses"]) for t in state["top_tools"]] == [
        ("c", 5), ("a", 3), ("b", 3), ("f", 2), ("d", 1)]
    assert later["top_tools"] == []


def test_unknown_session_is_a_one_line_error(ledger: Ledger) -> None:
    ledger.append("scope:p", ev("setting.changed", key="k", value=1))
    for stream in ("missing", "scope:p"):
        with pytest.raises(LedgerError, match="unknown session") as caught:
            ledger.state(stream)
        assert "\n" not in str(caught.value)
