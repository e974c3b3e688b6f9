"""A tool call is a tool use: each call of an assistant message counts once for the tool
its ``function.name`` names, and a call reported twice in one session (the message's
call id, ``tool.used`` with that ``call_id``) counts once, in either order, inline, in a
rebuild (fast fold and ``apply`` alike), after a fork and in the daily rollups. Also: the
``developer`` role is counted. Every test runs on SQLite and PostgreSQL."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from helpers.scenario import StepClock
from helpers.tables import assert_projections_equal_rebuild, dump_projections

from ctxledger import Ledger
from ctxledger.projections.registry import builtin_projections
from ctxledger.projections.session_view import MessageCounts, ToolUsage, ViewRequest

T0 = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
WEEK = timedelta(days=7)


@pytest.fixture
def clock() -> StepClock:
    return StepClock(T0)


@pytest.fixture
def timed(db_url: str, clock: StepClock) -> Iterator[Ledger]:
    """A ledger whose events are recorded at the test's clock."""
    with Ledger.open(db_url, clock=clock) as opened:
        yield opened


def call(call_id: str, name: str, **arguments: Any) -> dict[str, Any]:
    return {"id": call_id, "type": "function",
            "function": {"name": name, "arguments": json.dumps(arguments)}}


def calls(*tool_calls: dict[str, Any]) -> dict[str, Any]:
    """An assistant message that only calls tools."""
    return {"type": "message.appended",
            "data": {"role": "assistant", "content": None, "tool_calls": list(tool_calls)}}


def used(tool_name: str, call_id: str | None = None, **data: Any) -> dict[str, Any]:
    body = {"tool_name": tool_name, **data}
    if call_id is not None:
        body["call_id"] = call_id
    return {"type": "tool.used", "data": body}


def start(scope: str = "proj") -> dict[str, Any]:
    return {"type": "session.started", "data": {"scope": scope}}


def usage(ledger: Ledger, session: str) -> dict[tuple[str, str | None], tuple[int, int]]:
    """(tool, server) -> (window count, lifetime count) in the week up to the clock."""
    view = ledger.view(session, ViewRequest(now=ledger.clock(), usage_window=WEEK))
    return {(u.tool_name, u.server_name): (u.window_count, u.lifetime_count)
            for u in view.tool_usage}


def test_each_tool_call_of_a_message_is_one_use(timed: Ledger, clock: StepClock) -> None:
    timed.append("s1", [start(), calls(call("c1", "get_weather", city="Paris"),
                                       call("c2", "get_weather", city="Oslo"),
                                       call("c3", "get_time"))])
    clock.tick()
    timed.append("s1", calls(call("c4", "mcp__github__create_issue")))
    assert usage(timed, "s1") == {("get_weather", None): (2, 2), ("get_time", None): (1, 1),
                                  ("mcp__github__create_issue", None): (1, 1)}
    view = timed.view("s1", ViewRequest(now=clock(), usage_window=WEEK))
    weather = next(u for u in view.tool_usage if u.tool_name == "get_weather")
    assert weather == ToolUsage(tool_name="get_weather", server_name=None, window_count=2,
                                window_last_used=T0, lifetime_count=2,
                                lifetime_last_used=T0)
    assert_projections_equal_rebuild(timed)


@pytest.mark.parametrize("message_first", [True, False], ids=["message-first", "used-first"])
def test_a_call_reported_both_ways_counts_once(timed: Ledger, clock: StepClock,
                                               message_first: bool) -> None:
    message = calls(call("call_1", "get_weather", city="Paris"))
    report = used("get_weather", "call_1", ok=True)
    timed.append("s1", start())
    for event in (message, report) if message_first else (report, message):
        clock.tick()
        timed.append("s1", event)
    assert usage(timed, "s1") == {("get_weather", None): (1, 1)}
    # The first report is the use: its time is the last use.
    view = timed.view("s1", ViewRequest(now=clock(), usage_window=WEEK))
    assert view.tool_usage[0].lifetime_last_used == T0 + timedelta(minutes=7)
    assert_projections_equal_rebuild(timed)


def test_the_first_report_names_the_tool_and_server(timed: Ledger) -> None:
    timed.append("s1", [start(), used("create_issue", "call_9", server_name="github"),
                        calls(call("call_9", "create_issue"))])
    assert usage(timed, "s1") == {("create_issue", "github"): (1, 1)}


def test_calls_with_other_ids_or_in_other_sessions_count_apart(timed: Ledger) -> None:
    timed.append("s1", [start(), calls(call("call_1", "search")), used("search", "call_2"),
                        used("search")])  # no call id: always a use of its own
    timed.append("s2", [start(), calls(call("call_1", "search")), used("search", "call_1")])
    assert usage(timed, "s1") == {("search", None): (4, 4)}
    # The same call id again in one session (a message replaced under its id, say).
    timed.append("s1", [{"type": "message.appended", "data": {
        "message_id": "m1", "role": "assistant", "content": None,
        "tool_calls": [call("call_1", "search")]}}, used("search", "call_2")])
    assert usage(timed, "s1") == {("search", None): (4, 4)}
    assert_projections_equal_rebuild(timed)


def test_the_fast_rebuild_fold_equals_apply(timed: Ledger, clock: StepClock,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    timed.append("s1", [start(), used("a", "x1"), calls(call("x1", "a"), call("x2", "b"))])
    clock.tick()
    timed.append("s2", [start("other"), calls(call("x1", "a")), used("a", "x1"),
                        used("b", "x2")])
    timed.rebuild()
    folded = dump_projections(timed)
    for projection in builtin_projections():
        monkeypatch.setattr(type(projection), "rebuild_fold", lambda self, rows, time_of: None)
    timed.rebuild()
    assert dump_projections(timed) == folded
    assert usage(timed, "s1") == {("a", None): (1, 1), ("b", None): (1, 1)}
    assert usage(timed, "s2") == {("a", None): (1, 1), ("b", None): (1, 1)}


@pytest.mark.parametrize("count", [False, True], ids=["copies", "counting-copies"])
def test_a_fork_remembers_the_calls_it_copied(timed: Ledger, clock: StepClock,
                                              count: bool) -> None:
    done = timed.append("s1", [start(), calls(call("call_1", "get_weather"))])
    clock.tick()
    timed.fork("s1", "s1-fork", done.positions[-1], count=count)
    # The app reports the copied call in the fork, then makes a new one there.
    timed.append("s1-fork", [used("get_weather", "call_1"), calls(call("call_2", "get_weather")),
                             used("get_weather", "call_2")])
    # The original's call, the fork's copy of it only when the fork counts, the new call.
    uses = 3 if count else 2
    assert usage(timed, "s1-fork") == {("get_weather", None): (uses, uses)}
    assert_projections_equal_rebuild(timed)


def test_rollups_count_a_call_once(timed: Ledger, clock: StepClock) -> None:
    timed.append("s1", [start(), calls(call("c1", "get_weather"), call("c2", "get_time")),
                        used("get_weather", "c1"), used("get_time", "c2"), used("get_time")])
    clock.tick(timedelta(days=1))
    timed.append("s1", [used("get_weather", "c3"), calls(call("c3", "get_weather"))])
    now = clock.tick(timedelta(days=1))
    before = timed.usage("proj", days=3, now=now)
    timed.rollup(now)
    after = timed.usage("proj", days=3, now=now)
    assert [d.tool_uses for d in after.days] == [3, 1, 0]
    assert [(s.name, s.total, s.daily) for s in after.tools] == [
        ("get_time", 2, [2, 0, 0]), ("get_weather", 2, [1, 1, 0])]
    assert [d.tool_uses for d in before.days] == [d.tool_uses for d in after.days]
    assert_projections_equal_rebuild(timed)


def test_old_tool_used_payloads_stay_valid(timed: Ledger) -> None:
    timed.append("s1", [start(), {"type": "tool.used", "schema_version": 1,
                                  "data": {"tool": "grep", "success": True}}, used("grep")])
    assert usage(timed, "s1") == {("grep", None): (2, 2)}
    stored = [e.data for e in timed.events("s1") if e.type == "tool.used"]
    assert stored == [{"tool_name": "grep", "ok": True}, {"tool_name": "grep"}]


def test_developer_messages_are_counted(timed: Ledger) -> None:
    timed.append("s1", [start(), {"type": "message.appended", "data": {
        "role": "developer", "content": "Answer in French."}},
        {"type": "message.appended", "data": {"role": "user", "content": "Hi"}}])
    assert timed.view("s1").counts == MessageCounts(developer=1, user=1, total=2)
    assert timed.state("s1")["messages"]["developer"] == 1
    assert_projections_equal_rebuild(timed)
