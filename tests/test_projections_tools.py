"""Tool registry per scope, and tool usage: lifetime figures and exact window counts."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa
from freezegun import freeze_time
from helpers.legacy import append_legacy

from ctxledger import Ledger
from ctxledger.projections.session_view import ToolUsage, ViewRequest
from ctxledger.projections.tool_usage_tables import tool_uses

T0 = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
DAY = timedelta(days=1)
WEEK = timedelta(days=7)


def ev(type_: str, **data: Any) -> dict[str, Any]:
    return {"type": type_, "data": data}


def usage(ledger: Ledger, session: str, now: datetime,
          window: timedelta = WEEK) -> dict[str, ToolUsage]:
    view = ledger.view(session, ViewRequest(now=now, usage_window=window))
    assert view.usage_window == (now - window, now)
    found = {u.tool_name: u for u in view.tool_usage}
    assert len(found) == len(view.tool_usage), "a name used with two servers"
    return found


def test_registry_register_replace_remove_per_scope(ledger: Ledger) -> None:
    ledger.append("scope:a", [
        ev("tool.registered", name="Read", tool_type="builtin"),
        ev("tool.registered", name="mcp__gh__issues", tool_type="mcp_tool", server_name="gh"),
        ev("tool.registered", name="deploy", tool_type="slash_command", description="v1"),
    ])
    ledger.append("scope:b", ev("tool.registered", name="other", tool_type="skill"))
    ledger.append("scope:a", [ev("tool.registered", name="deploy", tool_type="skill",
                                 description="v2"),
                              ev("tool.removed", name="Read"),
                              ev("tool.removed", name="never-registered")])
    ledger.append("s", ev("session.started", scope="a"))
    tools = ledger.view("s", ViewRequest(tools=True)).tools
    assert [(t.name, t.tool_type, t.server_name, t.description) for t in tools] == [
        ("deploy", "skill", None, "v2"), ("mcp__gh__issues", "mcp_tool", "gh", None)]
    assert ledger.view("s").tools == ()  # not requested, not loaded


def test_lifetime_count_last_used_and_scope_attribution(ledger: Ledger) -> None:
    with freeze_time(T0) as frozen:
        ledger.append("s1", ev("session.started", scope="proj"))
        ledger.append("s2", ev("session.started", scope="proj"))
        ledger.append("s3", ev("session.started", scope="other"))
        ledger.append("s1", ev("tool.used", tool_name="grep", server_name="fs"))
        frozen.tick(DAY)
        ledger.append("s2", ev("tool.used", tool_name="grep", ok=False))
        ledger.append("s3", ev("tool.used", tool_name="grep"))
        ledger.append("loose", ev("tool.used", tool_name="grep"))  # no session.started
        now = T0 + 2 * DAY
    view = ledger.view("s1", ViewRequest(now=now, usage_window=WEEK))
    # A tool is its name and the server its uses named: a use that names none is not
    # guessed to be the earlier server's (two servers may share a bare name).
    assert [(u.tool_name, u.server_name, u.lifetime_count, u.lifetime_last_used)
            for u in view.tool_usage] == [("grep", None, 1, T0 + DAY), ("grep", "fs", 1, T0)]
    assert usage(ledger, "s3", now)["grep"].lifetime_count == 1
    assert usage(ledger, "loose", now)["grep"].lifetime_count == 1
    assert ledger.view("loose").scope == "default"


def test_window_counts_are_exact_including_the_edges(ledger: Ledger) -> None:
    offsets = [timedelta(0), DAY, 3 * DAY, 8 * DAY, 8 * DAY]
    with freeze_time(T0) as frozen:
        ledger.append("s", ev("session.started", scope="p"))
        for offset in offsets:
            frozen.move_to(T0 + offset)
            ledger.append("s", ev("tool.used", tool_name="edit"))
    # lo = now - 7 days falls exactly on the use at T0 + 1 day: it counts.
    at_edge = usage(ledger, "s", T0 + 8 * DAY)["edit"]
    assert (at_edge.window_count, at_edge.window_last_used) == (4, T0 + 8 * DAY)
    assert (at_edge.lifetime_count, at_edge.lifetime_last_used) == (5, T0 + 8 * DAY)
    # One microsecond later, that use falls out of the window.
    assert usage(ledger, "s", T0 + 8 * DAY + timedelta(microseconds=1))["edit"].window_count == 3
    # The upper edge is inclusive too: now == a use's time counts it.
    assert usage(ledger, "s", T0 + DAY)["edit"].window_count == 2
    before = usage(ledger, "s", T0 + DAY - timedelta(microseconds=1))["edit"]
    assert (before.window_count, before.window_last_used) == (1, T0)
    empty = usage(ledger, "s", T0 + 20 * DAY)["edit"]
    assert (empty.window_count, empty.window_last_used) == (0, None)
    assert empty.lifetime_count == 5


def test_window_counts_match_a_brute_force_count(ledger: Ledger) -> None:
    # Irregular spacing with repeated timestamps; every window checked against the list.
    steps_minutes = [0, 0, 7, 90, 0, 600, 1440, 1, 1, 5000, 0, 12000, 30, 30]
    times = []
    with freeze_time(T0) as frozen:
        ledger.append("s", ev("session.started", scope="p"))
        for i, step in enumerate(steps_minutes):
            frozen.tick(timedelta(minutes=step))
            ledger.append("s", ev("tool.used", tool_name="a" if i % 3 else "b"))
            times.append(("a" if i % 3 else "b", T0 + timedelta(
                minutes=sum(steps_minutes[: i + 1]))))
    probes = sorted({t for _, t in times} | {t + timedelta(seconds=1) for _, t in times})
    for now in probes:
        for window in (timedelta(hours=2), DAY, WEEK):
            got = usage(ledger, "s", now, window)
            for name in ("a", "b"):
                inside = [t for n, t in times if n == name and now - window <= t <= now]
                assert got[name].window_count == len(inside), (name, now, window)
                assert got[name].window_last_used == (max(inside) if inside else None)


def test_counts_survive_pruning_raw_rows_before_the_window(ledger: Ledger) -> None:
    with freeze_time(T0) as frozen:
        ledger.append("s", ev("session.started", scope="p"))
        for _ in range(6):
            ledger.append("s", ev("tool.used", tool_name="t"))
            frozen.tick(2 * DAY)
    now = T0 + 10 * DAY
    before = usage(ledger, "s", now)["t"]
    with ledger.engine.begin() as conn:
        pruned = conn.execute(tool_uses.delete().where(tool_uses.c.used_at < now - WEEK))
        assert pruned.rowcount == 2
    assert usage(ledger, "s", now)["t"] == before
    assert before.window_count == 4


def test_a_use_older_than_the_newest_is_counted_at_its_own_time(ledger: Ledger) -> None:
    """A clock stepping back (or an import of a log grouped by session) brings uses older
    than the tool's newest: each counts in the windows that hold its own time."""
    with freeze_time(T0) as frozen:
        ledger.append("s", ev("session.started", scope="p"))
        ledger.append("s", ev("tool.used", tool_name="t"))
        frozen.move_to(T0 - 12 * DAY)
        ledger.append("s", ev("tool.used", tool_name="t"))
        frozen.move_to(T0 - 2 * DAY)
        ledger.append("s", ev("tool.used", tool_name="t"))
        frozen.move_to(T0 + DAY)
        ledger.append("s", ev("tool.used", tool_name="t"))
    with ledger.engine.connect() as conn:
        stamps = conn.execute(sa.select(tool_uses.c.seq, tool_uses.c.used_at)
                              .order_by(tool_uses.c.seq)).all()
    assert [(s, t) for s, t in stamps] == [(1, T0), (2, T0 + DAY)]
    got = usage(ledger, "s", T0)["t"]
    # The 12-day-old use is outside the 7-day window; the 2-day-old one inside.
    assert (got.window_count, got.window_last_used) == (2, T0)
    assert (got.lifetime_count, got.lifetime_last_used) == (4, T0 + DAY)
    assert (usage(ledger, "s", T0 - DAY)["t"].window_count,
            usage(ledger, "s", T0 - DAY)["t"].window_last_used) == (1, T0 - 2 * DAY)
    assert usage(ledger, "s", T0 - 10 * DAY)["t"].window_count == 1
    assert usage(ledger, "s", T0 + 2 * DAY)["t"].window_count == 3
    assert usage(ledger, "s", T0 + 20 * DAY)["t"].window_count == 0
    before = ledger.view("s", ViewRequest(now=T0, usage_window=WEEK)).tool_usage
    ledger.rebuild("tool_usage")
    assert ledger.view("s", ViewRequest(now=T0, usage_window=WEEK)).tool_usage == before


def test_usage_without_a_window_has_lifetime_figures_only(ledger: Ledger) -> None:
    ledger.append("s", [ev("session.started", scope="p"), ev("tool.used", tool_name="t")])
    view = ledger.view("s", ViewRequest(tools=True))
    assert view.usage_window is None
    [only] = view.tool_usage
    assert (only.lifetime_count, only.window_count, only.window_last_used) == (1, 0, None)


def test_rebuilding_one_projection_keeps_the_scope_each_event_had(ledger: Ledger) -> None:
    """A session that moves scope: uses before the move stay with the first scope, also
    when tool_usage or observations is rebuilt alone (they keep their own scope map)."""
    ledger.append("s", [ev("session.started", scope="first"), ev("tool.used", tool_name="t"),
                        ev("observation.recorded", kind="change", content="before")])
    # A second session.started is refused now; older logs may hold one.
    append_legacy(ledger, "s", [ev("session.started", scope="second"),
                                ev("tool.used", tool_name="t"),
                                ev("observation.recorded", kind="change", content="after")])
    ledger.append("other", ev("session.started", scope="first"))

    def snapshot() -> tuple[Any, ...]:
        first = ledger.view("other", ViewRequest(now=T0, usage_window=WEEK, observations=9))
        second = ledger.view("s", ViewRequest(now=T0, usage_window=WEEK, observations=9))
        return (first.tool_usage[0].lifetime_count, [o.content for o in first.observations],
                second.tool_usage[0].lifetime_count, [o.content for o in second.observations])

    assert snapshot() == (1, ["before"], 1, ["after"])
    for name in ("tool_usage", "observations"):
        assert ledger.rebuild(name) == [name]
        assert snapshot() == (1, ["before"], 1, ["after"])
