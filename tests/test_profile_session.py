"""Profile ``session`` (Laminark): previous summary, observations, ranked tools, caps.

Read views are built by hand; tool usage windows are computed from raw use times the way
the loader does (``[now - 7 days, now]``, inclusive), so moving the frozen clock changes
what the assembler sees exactly as it would in production.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from freezegun import freeze_time

from ctxledger.assembler import assemble, policy_for, request_for
from ctxledger.assembler.errors import AssemblyError
from ctxledger.assembler.model import FORMAT_VERSION, WITHOUT_REGEX_KEYS, Assembly
from ctxledger.assembler.profiles.session import SessionPolicy, SessionReport
from ctxledger.assembler.profiles.session.tool_ranking import server_of
from ctxledger.assembler.timefmt import relative_time
from ctxledger.projections.session_view import (
    Observation,
    PreviousSession,
    SessionView,
    Tool,
    ToolUsage,
)

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
WINDOW = timedelta(days=7)
TOOLS_HEADER = "## Available Tools"


def tool(name: str, tool_type: str = "slash_command", *, server_name: str | None = None,
         description: str | None = None) -> Tool:
    return Tool(name=name, tool_type=tool_type, server_name=server_name,
                description=description, position=len(name))


def usage(uses: Mapping[str, Sequence[datetime]], now: datetime) -> tuple[ToolUsage, ...]:
    """Per tool name: window count and last use in [now - 7d, now], lifetime figures."""
    rows = []
    for name in sorted(uses):
        times = sorted(uses[name])
        inside = [t for t in times if now - WINDOW <= t <= now]
        rows.append(ToolUsage(tool_name=name, server_name=None, window_count=len(inside),
                              window_last_used=max(inside) if inside else None,
                              lifetime_count=len(times),
                              lifetime_last_used=max(times) if times else None))
    return tuple(rows)


def observation(kind: str, content: str, at: datetime, position: int) -> Observation:
    return Observation(kind=kind, content=content, source=None, recorded_at=at,
                       position=position, stream_id="old-session")


def view(*, tools: Sequence[Tool] = (), uses: Mapping[str, Sequence[datetime]] | None = None,
         observations: Sequence[Observation] = (), summary: str | None = None,
         now: datetime = NOW, settings: Mapping[str, Any] | None = None) -> SessionView:
    previous = PreviousSession(stream_id="old-session", summary=summary,
                               ended_at=now - timedelta(hours=5), position=50) \
        if summary is not None else None
    return SessionView(
        stream_id="new-session", scope="proj", position=777, exists=True,
        settings=dict(settings or {}), tools=tuple(sorted(tools, key=lambda t: t.name)),
        tool_usage=usage(uses or {}, now), usage_window=(now - WINDOW, now),
        observations=tuple(sorted(observations, key=lambda o: o.position)),
        previous_session=previous)


def run(session_view: SessionView, now: datetime = NOW) -> Assembly:
    return assemble(session_view, "session", now)


def report_of(assembly: Assembly) -> SessionReport:
    assert isinstance(assembly.report, SessionReport)
    return assembly.report


def tool_section(text: str) -> str:
    start = text.find(TOOLS_HEADER)
    return "" if start < 0 else text[start:]


def tool_order(text: str) -> list[str]:
    return [line[2:] for line in tool_section(text).splitlines()[1:] if line.startswith("- ")]


def ago(**delta: float) -> datetime:
    return NOW - timedelta(**delta)


def expected_score(count: int, max_usage: int, age_days: float) -> float:
    return round(0.7 * count / max_usage + 0.3 * math.exp(-0.693 * age_days / 7), 6)


# -- the seed's four tests ---------------------------------------------------------------


def test_tool_section_fits_within_the_500_character_budget() -> None:
    tools = [tool(f"/command-number-{index:02d}-with-a-long-name") for index in range(24)]
    uses = {t.name: [ago(hours=index + 1)] * (index % 5 + 1) for index, t in enumerate(tools)}
    assembly = run(view(tools=tools, uses=uses, summary="Did things."))
    section = tool_section(assembly.text)
    report = report_of(assembly)
    assert section.startswith(TOOLS_HEADER) and len(section) <= 500
    shown = len(tool_order(assembly.text))
    assert 0 < shown < 24
    assert report.tool_section_chars == len(section)
    # Lines go in rank order until the next one would break the budget.
    ranked_lines = [line for line in section.splitlines()[1:] if line.startswith("- ")]
    next_entry = report.tools[shown]
    next_line = f"- {next_entry.name} ({next_entry.lifetime_count}x)"
    assert len("\n".join([TOOLS_HEADER, *ranked_lines, next_line])) > 500
    assert [t.shown for t in report.tools] == [True] * shown + [False] * (24 - shown)
    overflow = f"({24 - shown} more available)"
    body = "\n".join([TOOLS_HEADER, *ranked_lines])
    if len(body) + 1 + len(overflow) <= 500:
        assert section == f"{body}\n{overflow}" and report.more_available == 24 - shown
    else:
        assert section == body and report.more_available == 0
    dropped = [d for d in assembly.decisions
               if d.reason == "over_section_budget" and d.item != "tools:more"]
    assert len(dropped) == 24 - shown


def test_more_available_line_after_the_shown_tools() -> None:
    tools = [tool(f"/tool-number-{index:02d}-abcd") for index in range(90)]
    assembly = run(view(tools=tools, summary="S"))
    section = tool_section(assembly.text)
    shown = len(tool_order(assembly.text))
    assert 0 < shown < 90
    assert section.endswith(f"\n({90 - shown} more available)") and len(section) <= 500


def test_recently_used_tools_come_before_unused_ones() -> None:
    tools = [tool("tool-A"), tool("tool-B"), tool("tool-C")]
    uses = {"tool-B": [ago(hours=h) for h in range(1, 6)],
            "tool-C": [ago(hours=2), ago(hours=3)]}
    assembly = run(view(tools=tools, uses=uses, summary="Summary."))
    assert tool_order(assembly.text) == ["tool-B (5x)", "tool-C (2x)", "tool-A"]


def test_no_tool_section_without_non_builtin_tools() -> None:
    tools = [tool("Read", "builtin"), tool("Bash", "builtin")]
    assembly = run(view(tools=tools, uses={"Read": [ago(hours=1)]}, summary="Summary."))
    assert TOOLS_HEADER not in assembly.text
    assert assembly.section("tools") is None
    for name in ("Read", "Bash"):
        decision = assembly.decision(f"tool:{name}")
        assert (decision.action, decision.reason) == ("rejected", "excluded_tool_type")


def test_overall_context_stays_under_6000_characters_with_tools() -> None:
    tools = [tool(f"/tool-{index:02d}") for index in range(20)]
    uses = {t.name: [ago(hours=index + 1)] for index, t in enumerate(tools)}
    observations = [observation(kind, f"{kind} number {i}: " + "detail " * 12,
                                ago(hours=i + 1), position=i)
                    for i, kind in enumerate(["change", "decision", "finding", "reference"] * 3)]
    assembly = run(view(tools=tools, uses=uses, observations=observations,
                        summary="S" * 2000))
    assert len(assembly.text) <= 6000
    assert TOOLS_HEADER in assembly.text
    assert report_of(assembly).chars == len(assembly.text)


# -- format ------------------------------------------------------------------------------


def test_context_format_groups_and_lines() -> None:
    long = "x" * 130
    observations = [
        observation("change", "Created the auth module", ago(minutes=30), 1),
        observation("change", "Fixed\nthe   pool\tleak", ago(hours=2), 2),
        observation("decision", "Use JWT with 15 minute expiry", ago(days=1, hours=1), 3),
        observation("finding", long, ago(days=3), 4),
        observation("reference", "docs/auth.md", ago(days=8), 5),
    ]
    assembly = run(view(observations=observations, summary="Implemented auth middleware."))
    assert assembly.text == "\n".join([
        "[ctxledger - Session Context]",
        "",
        "## Previous Session",
        "Implemented auth middleware.",
        "",
        "## Recent Changes",
        "- Fixed the pool leak (2 hours ago)",
        "- Created the auth module (30 minutes ago)",
        "",
        "## Active Decisions",
        "- Use JWT with 15 minute expiry (yesterday)",
        "",
        "## Recent Findings",
        f"- {'x' * 120}... (3 days ago)",
        "",
        "## Reference Docs",
        "- docs/auth.md (1 week ago)",
    ])
    assert [s.name for s in assembly.sections] == [
        "previous_session", "changes", "decisions", "findings", "references"]
    report = report_of(assembly)
    assert report.observations == {"change": 2, "decision": 1, "finding": 1, "reference": 1}
    assert assembly.decision("observation:4").detail["cut"] is True
    assert assembly.tokens.framing > 0 and assembly.tokens.total == (
        assembly.tokens.framing + sum(assembly.tokens.sections.values()))


def test_welcome_message_without_previous_session_or_observations() -> None:
    policy = policy_for("session", {})
    assert isinstance(policy, SessionPolicy)
    alone = run(view())
    assert alone.text == policy.welcome_message
    assert report_of(alone).welcome is True
    assert alone.decision("welcome").reason == "no_previous_session_or_observations"
    with_tools = run(view(tools=[tool("/deploy")]))
    assert with_tools.text == f"{policy.welcome_message}\n\n{TOOLS_HEADER}\n- /deploy"
    ended_without_summary = run(view(summary=""))
    assert report_of(ended_without_summary).welcome is True


@pytest.mark.parametrize(("delta", "expected"), [
    (timedelta(seconds=-5), "just now"),
    (timedelta(seconds=59), "just now"),
    (timedelta(minutes=1), "1 minute ago"),
    (timedelta(minutes=59, seconds=59), "59 minutes ago"),
    (timedelta(hours=1), "1 hour ago"),
    (timedelta(hours=23, minutes=59), "23 hours ago"),
    (timedelta(days=1), "yesterday"),
    (timedelta(days=6, hours=23), "6 days ago"),
    (timedelta(days=7), "1 week ago"),
    (timedelta(days=13), "1 week ago"),
    (timedelta(days=21), "3 weeks ago"),
])
def test_relative_time(delta: timedelta, expected: str) -> None:
    assert relative_time(NOW - delta, NOW) == expected


# -- ranking -----------------------------------------------------------------------------


def test_mcp_server_aggregation_and_exact_scores() -> None:
    tools = [tool("github", "mcp_server", server_name="github"),
             tool("mcp__github__create_issue", "mcp_tool", server_name="github"),
             tool("mcp__github__search", "mcp_tool"),
             tool("/deploy")]
    uses = {"mcp__github__create_issue": [ago(days=3), ago(days=2), ago(days=1)],
            "mcp__github__search": [ago(days=4), ago(days=2)],
            "/deploy": [ago(days=5), ago(days=4), ago(days=3, hours=12), ago(days=3)],
            "Read": [ago(hours=1)]}
    assembly = run(view(tools=tools, uses=uses, summary="Summary."))
    report = report_of(assembly)
    assert report.max_usage == 5  # the github server's 3 + 2
    github, deploy = report.tools
    assert (github.entry, github.window_count, github.lifetime_count) == ("tool:github", 5, 5)
    assert github.score == expected_score(5, 5, 1.0)
    assert deploy.score == expected_score(4, 5, 3.0)
    assert tool_order(assembly.text) == ["MCP: github (5x)", "/deploy (4x)"]
    for name in ("mcp__github__create_issue", "mcp__github__search"):
        decision = assembly.decision(f"tool:{name}")
        assert (decision.action, decision.reason, decision.detail["entry"]) == (
            "dropped", "merged_into_server_entry", "tool:github")
    assert assembly.decision("tool:github").detail["usage_source"] == "server"


def test_mcp_tools_without_a_server_entry_appear_once_through_it() -> None:
    tools = [tool("mcp__linear__create", "mcp_tool"), tool("mcp__linear__list", "mcp_tool"),
             tool("mcp__my_db__query", "mcp_tool"), tool("jira_search", "mcp_tool",
                                                         server_name="jira")]
    uses = {"mcp__linear__create": [ago(hours=1)], "mcp__my_db__query": [ago(hours=2)] * 2}
    assembly = run(view(tools=tools, uses=uses, summary="Summary."))
    assert tool_order(assembly.text) == ["MCP: my_db (2x)", "MCP: linear (1x)", "MCP: jira"]
    assert [t.entry for t in report_of(assembly).tools] == [
        "mcp_server:my_db", "mcp_server:linear", "mcp_server:jira"]


def test_server_pattern_keeps_underscored_server_names() -> None:
    policy = policy_for("session", {})
    assert isinstance(policy, SessionPolicy)
    pattern = re.compile(policy.mcp_server_pattern)
    assert server_of("mcp__my_server__do_thing", pattern) == "my_server"
    assert server_of("mcp__a__b__c", pattern) == "a"
    assert server_of("mcp_single__x", pattern) is None


def test_max_usage_floor_and_unused_tools_score_zero() -> None:
    tools = [tool("/beta"), tool("/alpha"), tool("/gamma")]
    uses = {"/beta": [ago(days=10)] * 9, "/gamma": [ago(days=9)] * 9, "/alpha": [ago(days=8)]}
    assembly = run(view(tools=tools, uses=uses, summary="Summary."))
    report = report_of(assembly)
    assert report.max_usage == 1
    assert [t.score for t in report.tools] == [0.0, 0.0, 0.0]
    # Nothing used in the window: nothing to rank by, so registration order stands
    # (/beta first; /alpha and /gamma were registered at the same position: entry id),
    # whatever the lifetime usage.
    assert [t.name for t in report.tools] == ["/beta", "/alpha", "/gamma"]
    assert assembly.format_version == FORMAT_VERSION  # an order format 5 did not make


def test_with_no_usage_in_the_window_tools_keep_registration_order() -> None:
    tools = [replace(tool(name), position=at)
             for name, at in (("/zeta", 1), ("/alpha", 2), ("/mid", 3))]
    never = run(view(tools=tools, summary="Summary."))
    assert [t.name for t in report_of(never).tools] == ["/zeta", "/alpha", "/mid"]
    assert tool_section(never.text).splitlines()[1:] == ["- /zeta", "- /alpha", "- /mid"]
    assert never.format_version == FORMAT_VERSION
    # Registered in name order: the same order as before, so the same hashed output.
    in_order = [replace(one, position=at) for one, at in zip(tools, (3, 1, 2), strict=True)]
    same = run(view(tools=in_order, summary="Summary."))
    assert [t.name for t in report_of(same).tools] == ["/alpha", "/mid", "/zeta"]
    assert same.format_version == WITHOUT_REGEX_KEYS
    # One use in the window: ranked again (score, lifetime usage, name).
    used = run(view(tools=tools, uses={"/mid": [ago(hours=1)]}, summary="Summary."))
    assert [t.name for t in report_of(used).tools] == ["/mid", "/alpha", "/zeta"]
    assert used.format_version == WITHOUT_REGEX_KEYS


def test_ties_break_on_lifetime_usage_then_name() -> None:
    tools = [tool("/zeta"), tool("/eta"), tool("/theta")]
    same = [ago(hours=3), ago(hours=2)]
    uses = {"/zeta": same, "/eta": same, "/theta": [*same, ago(days=30)]}
    report = report_of(run(view(tools=tools, uses=uses, summary="Summary.")))
    assert len({t.score for t in report.tools}) == 1
    assert [t.name for t in report.tools] == ["/theta", "/eta", "/zeta"]


def test_line_formats_per_tool_type() -> None:
    tools = [tool("srv", "mcp_server", server_name="things"), tool("/cmd"),
             tool("writer", "skill", description="Drafts\nprose"), tool("linter", "plugin"),
             tool("misc", "other")]
    uses = {name: [ago(hours=i + 1)] * (5 - i)
            for i, name in enumerate(["mcp__things__x", "/cmd", "writer", "linter", "misc"])}
    assembly = run(view(tools=tools, uses=uses, summary="Summary."))
    assert tool_order(assembly.text) == ["MCP: things (5x)", "/cmd (4x)",
                                         "skill: writer - Drafts prose", "plugin: linter",
                                         "misc (1x)"]


def test_overflow_line_only_when_it_fits() -> None:
    tools = [tool("/" + "a" * 40), tool("/" + "b" * 40), tool("/" + "c" * 40)]
    uses = {t.name: [ago(hours=i + 1)] * (3 - i) for i, t in enumerate(tools)}
    first_line = f"- /{'a' * 40} (3x)"
    room = len(TOOLS_HEADER) + 1 + len(first_line)
    overflow = "(2 more available)"
    tight = run(view(tools=tools, uses=uses, summary="S",
                     settings={"tool_section_budget": room + len(overflow)}))
    assert tool_section(tight.text) == f"{TOOLS_HEADER}\n{first_line}"
    assert report_of(tight).more_available == 0
    roomy = run(view(tools=tools, uses=uses, summary="S",
                     settings={"tool_section_budget": room + 1 + len(overflow)}))
    assert tool_section(roomy.text) == f"{TOOLS_HEADER}\n{first_line}\n{overflow}"
    assert roomy.decision("section:tools").detail["overflow_line"] is True


# -- the overall cap ---------------------------------------------------------------------


def capped_fixture(cap: int | None) -> Assembly:
    observations = [
        observation("reference", "ref one: " + "r" * 60, ago(days=3), 1),
        observation("reference", "ref two: " + "r" * 60, ago(days=2), 2),
        observation("reference", "ref three: " + "r" * 60, ago(days=1), 3),
        observation("finding", "finding one: " + "f" * 60, ago(days=2), 4),
        observation("change", "change one: " + "c" * 60, ago(hours=3), 5),
        observation("decision", "decision one: " + "d" * 60, ago(hours=4), 6),
    ]
    tools = [tool(f"/tool-{i}") for i in range(5)]
    settings = {"session_max_chars": cap} if cap is not None else {}
    return run(view(tools=tools, uses={t.name: [ago(hours=1)] for t in tools},
                    observations=observations, summary="P" * 900, settings=settings))


def test_over_the_cap_the_tool_section_goes_first_then_oldest_references() -> None:
    full = capped_fixture(None)
    assert len(full.text) < 6000
    tools_part = len(tool_section(full.text)) + 2
    oldest_ref = len("- ref one: " + "r" * 60 + " (3 days ago)") + 1
    # Dropping the tools alone suffices.
    only_tools = capped_fixture(len(full.text) - tools_part)
    assert TOOLS_HEADER not in only_tools.text and "ref one" in only_tools.text
    assert len(only_tools.text) == len(full.text) - tools_part
    assert only_tools.decision("section:tools").reason == "over_total_budget"
    assert only_tools.decision("tool:/tool-0").action == "dropped"
    # One character less: the oldest reference goes too, nothing else.
    one_ref = capped_fixture(len(full.text) - tools_part - 1)
    assert "ref one" not in one_ref.text and "ref two" in one_ref.text
    assert one_ref.decision("observation:1").reason == "over_total_budget"
    assert len(one_ref.text) == len(full.text) - tools_part - oldest_ref
    assert all(d.action == "included" for d in one_ref.decisions
               if d.item in ("observation:2", "observation:3", "observation:4",
                             "observation:5", "observation:6"))


def test_trim_order_references_then_findings_then_changes() -> None:
    full = capped_fixture(None)
    tools_part = len(tool_section(full.text)) + 2
    references = full.text[full.text.index("## Reference Docs"):]
    # Over by more than the tools and every reference: the finding must go too.
    assembly = capped_fixture(len(full.text) - tools_part - len(references) - 10)
    dropped = sorted((d for d in assembly.decisions if d.reason == "over_total_budget"),
                     key=lambda d: (-int(d.detail["size_before"] or 0), d.item))
    observations = [d.item for d in dropped if d.item.startswith("observation:")]
    assert observations == ["observation:1", "observation:2", "observation:3",
                            "observation:4"]
    assert dropped[0].item == "section:tools"
    assert "## Reference Docs" not in assembly.text and "## Recent Findings" not in assembly.text
    assert "## Recent Changes" in assembly.text and "## Active Decisions" in assembly.text
    assert assembly.decision("section:references").action == "dropped"
    assert assembly.decision("observation:5").action == "included"


def test_a_huge_previous_summary_is_shortened_to_the_cap() -> None:
    observations = [observation("decision", "keep going", ago(hours=1), 1)]
    assembly = run(view(tools=[tool("/x")], uses={"/x": [ago(hours=1)]},
                        observations=observations, summary="Q" * 7000))
    assert len(assembly.text) == 6000
    decision = assembly.decision("previous_session:old-session")
    assert (decision.action, decision.reason) == ("truncated", "over_total_budget_shortened")
    assert decision.detail["chars_before"] == 7000
    assert assembly.decision("observation:1").action == "dropped"
    assert "Q" * 100 in assembly.text and assembly.text.endswith("...")
    assert assembly.warnings == []


# -- moving the clock --------------------------------------------------------------------


def test_ranks_change_as_time_moves_and_old_usage_leaves_the_window() -> None:
    tools = [tool("/alpha"), tool("/beta")]
    with freeze_time("2026-03-01T12:00:00Z") as frozen:
        start = datetime.now(UTC)
        uses = {"/alpha": [start - timedelta(days=6)] * 4,
                "/beta": [start - timedelta(hours=1)] * 3}

        def snapshot() -> tuple[list[str], SessionReport]:
            now = datetime.now(UTC)
            assembly = run(view(tools=tools, uses=uses, summary="S", now=now), now)
            return tool_order(assembly.text), report_of(assembly)

        order, report = snapshot()
        assert order == ["/alpha (4x)", "/beta (3x)"]
        assert report.tools[0].score == expected_score(4, 4, 6.0)
        assert report.tools[1].score == expected_score(3, 4, 1 / 24)

        frozen.tick(timedelta(days=1))  # alpha's uses are exactly 7 days old: still in
        order, report = snapshot()
        assert order == ["/alpha (4x)", "/beta (3x)"]
        assert report.tools[0].window_count == 4
        assert report.tools[0].score == expected_score(4, 4, 7.0)

        frozen.tick(timedelta(days=1))  # now 8 days old: out of the window
        order, report = snapshot()
        assert order == ["/beta (3x)", "/alpha (4x)"]
        alpha = next(t for t in report.tools if t.name == "/alpha")
        assert (alpha.window_count, alpha.score, alpha.lifetime_count) == (0, 0.0, 4)
        assert report.max_usage == 3
        assert report.tools[0].score == expected_score(3, 3, 2 + 1 / 24)


def test_relative_times_follow_the_clock() -> None:
    with freeze_time("2026-03-01T12:00:00Z") as frozen:
        recorded = datetime.now(UTC)
        observations = [observation("change", "Shipped v2", recorded, 1)]
        texts = []
        for step in (timedelta(0), timedelta(minutes=5), timedelta(hours=3),
                     timedelta(days=1)):
            frozen.tick(step)
            now = datetime.now(UTC)
            texts.append(run(view(observations=observations, now=now), now).text)
        assert [t.splitlines()[-1] for t in texts] == [
            "- Shipped v2 (just now)", "- Shipped v2 (5 minutes ago)",
            "- Shipped v2 (3 hours ago)", "- Shipped v2 (yesterday)"]


# -- contract ----------------------------------------------------------------------------


def test_request_for_session() -> None:
    request = request_for("session", policy_for("session", {"observation_limit": 7}), NOW)
    assert (request.now, request.usage_window, request.observations) == (NOW, WINDOW, 7)
    assert request.previous_session and request.tools and request.history == "none"


def test_a_view_counted_over_another_window_is_refused() -> None:
    wrong = view(tools=[tool("/x")], uses={"/x": [ago(hours=1)]})
    with pytest.raises(AssemblyError, match="7-day window"):
        run(wrong, NOW + timedelta(hours=1))


def test_every_candidate_has_exactly_one_decision() -> None:
    tools = [tool("github", "mcp_server"), tool("mcp__github__x", "mcp_tool"),
             tool("Read", "builtin"), tool("/a"), tool("/b")]
    observations = [observation("finding", "f", ago(hours=1), 1)]
    assembly = run(view(tools=tools, uses={"/a": [ago(hours=1)]}, observations=observations,
                        summary="Summary."))
    items = [d.item for d in assembly.decisions]
    assert len(items) == len(set(items))
    assert set(items) == {
        "section:previous_session", "previous_session:old-session", "section:findings",
        "observation:1", "tool:github", "tool:mcp__github__x", "tool:Read", "tool:/a",
        "tool:/b", "section:tools"}
    shown = {item.id for section in assembly.sections for item in section.items}
    assert shown == {d.item for d in assembly.decisions if d.action == "included"}
