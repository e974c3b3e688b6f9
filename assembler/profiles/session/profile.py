"""Profile ``session`` (Laminark): the context injected when a session starts.

Rules (SPEC §3 "Profile session"), in the seed's formats with ctxledger naming:

1. ``## Previous Session``: the summary of the scope's previous session.
2. Recent observations grouped by kind (``## Recent Changes``, ``## Active Decisions``,
   ``## Recent Findings``, ``## Reference Docs``), newest first, one line each:
   ``- CONTENT (RELATIVE_TIME)``, CONTENT on one line and cut at 120 characters + ``...``.
3. ``## Available Tools``: ranked (``tool_ranking``), lines added while the section,
   header included, stays within 500 characters, then ``(N more available)`` if it fits.
   No non-builtin tools: no section at all.

The whole text is at most 6000 characters. When over, the tool section goes first, then
observations: references, then findings, then changes, each oldest first. SPEC names no
further step, yet promises the cap, so two more follow if ever needed: decisions (oldest
first), then the previous summary is shortened. With no previous summary and no
observations the context part is the welcome message (the tool section still follows).

Every length is in the policy's ``length_unit``: UTF-16 units by default, the
``String.length`` the app (TypeScript) measured with, so an emoji counts 2.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, ClassVar

from ctxledger.assembler.budget import ShedStep
from ctxledger.assembler.candidates import (
    Candidate,
    Composed,
    Frame,
    Piece,
    SectionLayout,
    joined,
)
from ctxledger.assembler.decision_engine import Engine
from ctxledger.assembler.errors import AssemblyError
from ctxledger.assembler.inputs import Inputs
from ctxledger.assembler.model import Assembly, format_for
from ctxledger.assembler.policy import Policy
from ctxledger.assembler.profiles.base import Profile, report_of
from ctxledger.assembler.profiles.session.policy import (
    DROP_TOOLS,
    SECTION_PREVIOUS,
    SECTION_TOOLS,
    SECTION_WELCOME,
    SHORTEN_PREVIOUS,
    ObservationGroup,
    SessionPolicy,
)
from ctxledger.assembler.profiles.session.report import SessionReport, ToolRank
from ctxledger.assembler.profiles.session.tool_ranking import (
    RankedEntry,
    ToolEntry,
    build_entries,
    rank_entries,
)
from ctxledger.assembler.report import ProfileReport
from ctxledger.assembler.text import ELLIPSIS, LengthUnit, cut, one_line, shorten_to, text_length
from ctxledger.assembler.timefmt import relative_time
from ctxledger.assembler.tokens import TokenCounter
from ctxledger.projections.session_view import (
    Observation,
    PreviousSession,
    SessionView,
    ViewRequest,
)
from ctxledger.store.clock import ensure_utc

if TYPE_CHECKING:
    from rich.console import RenderableType

@dataclass(frozen=True, slots=True)
class _Group:
    """An observation section: its frame (heading) candidate and its lines, newest first."""

    spec: ObservationGroup
    frame: Candidate
    lines: list[Candidate]


@dataclass(frozen=True, slots=True)
class _Layout:
    """Everything ``render`` needs to know which parts are in."""

    header: str
    welcome: str
    previous_frame: Candidate | None
    previous: Candidate | None
    groups: list[_Group]
    tools_frame: Candidate | None
    tool_lines: list[Candidate]
    tools_more: Candidate | None


class SessionProfile(Profile):
    """The ``session`` profile."""

    name: ClassVar[str] = "session"
    policy_type: ClassVar[type[Policy]] = SessionPolicy
    report_type: ClassVar[type[ProfileReport]] = SessionReport
    # Its own start is an input (the context it exists for); usage, observations and the
    # previous session come from every session of the scope, tools from the scope. A
    # message may call tools, which are uses too.
    inputs: ClassVar[Inputs] = Inputs(
        session=frozenset({"session.started", "tool.used", "message.appended",
                           "observation.recorded"}),
        scope=frozenset({"tool.registered", "tool.removed"}),
        peers=frozenset({"tool.used", "message.appended", "observation.recorded",
                         "session.ended"}))

    def request(self, policy: Policy, now: datetime, counter: TokenCounter) -> ViewRequest:
        """Previous session, recent observations, tools and their usage in the window."""
        assert isinstance(policy, SessionPolicy)
        return ViewRequest(now=now, usage_window=policy.usage_window,
                           observations=policy.observation_limit, previous_session=True,
                           tools=True)

    def assemble(self, engine: Engine, view: SessionView, now: datetime,
                 policy: Policy) -> Assembly:
        """Build the session-start context under the section and total budgets."""
        assert isinstance(policy, SessionPolicy)
        pattern = re.compile(policy.mcp_server_pattern)
        entries, folded = build_entries(view.tools, excluded_types=policy.excluded_tool_types,
                                        pattern=pattern)
        window_start = now - policy.usage_window
        if entries and view.usage_window is not None \
                and view.usage_window != (window_start, now):
            raise AssemblyError(
                f"session {view.stream_id!r}: the read view counts tool usage over "
                f"{view.usage_window[0].isoformat()}..{view.usage_window[1].isoformat()}, "
                f"not the {policy.usage_window_days}-day window ending at {now.isoformat()}")
        ranking = rank_entries(entries, view.tool_usage, now=now, pattern=pattern,
                               weights=policy.weights)
        ranked, max_usage = ranking.entries, ranking.max_usage
        prior = view.previous_session
        engine.counter.prefetch([
            "", "\n", "\n\n", policy.context_role, policy.header, policy.welcome_message,
            policy.previous_heading,
            policy.tools_heading, *(group.heading for group in policy.groups),
            *((prior.summary,) if prior is not None and prior.summary else ()),
            *(observation_line(item, now, policy) for item in view.observations),
            *(tool_line(item.entry, item.usage.lifetime_count) for item in ranked)])

        previous_frame, previous = _previous_section(engine, prior, policy)
        groups = _observation_groups(engine, view.observations, now, policy)
        for item in folded:
            candidate = engine.candidate(f"tool:{item.tool.name}", SECTION_TOOLS, "")
            engine.exclude(candidate, "rejected" if item.reason == "excluded_tool_type"
                           else "dropped", item.reason, tool_type=item.tool.tool_type,
                           entry=item.entry_id)
        tools_frame, tool_lines, tools_more, more = _tool_section(engine, ranked, policy)

        layout = _Layout(policy.header, policy.welcome_message, previous_frame, previous,
                         groups, tools_frame, tool_lines, tools_more)
        kept = _kept_candidates(layout)
        steps = _trim_steps(layout, policy)
        placeholder = Frame(policy.welcome_message, SECTION_WELCOME)

        unit = policy.length_unit

        def measure(current: Sequence[Candidate]) -> int:
            pieces = prompt_pieces(layout, {candidate.id: candidate for candidate in current},
                            placeholder)
            return sum(text_length(piece.text, unit) for piece in pieces)

        shed = engine.shed_until_fits(kept, steps, limit=policy.max_chars, unit="chars",
                                      measure=measure, reason="over_total_budget")
        final = {candidate.id: candidate for candidate in shed.kept}
        welcome = not _has_context(layout, final)
        greeting: Piece = placeholder
        if welcome:
            greeting = engine.candidate(SECTION_WELCOME, SECTION_WELCOME,
                                        policy.welcome_message)
            engine.include(greeting, "no_previous_session_or_observations")
        pieces = prompt_pieces(layout, final, greeting)
        length = text_length("".join(piece.text for piece in pieces), unit)
        warnings: list[str] = []
        if not shed.fits:
            warnings.append(f"session context is {length} characters, over the "
                            f"{policy.max_chars}-character cap after every trim step")
        sections = [SectionLayout(SECTION_WELCOME), SectionLayout(SECTION_PREVIOUS),
                    *(SectionLayout(group.spec.section) for group in groups),
                    SectionLayout(SECTION_TOOLS)]

        report = SessionReport(
            chars=length, max_chars=policy.max_chars, welcome=welcome,
            previous_session=prior.stream_id if prior is not None else None,
            observations={group.spec.kind: sum(line.id in final for line in group.lines)
                          for group in groups},
            tool_section_chars=_tool_section_chars(layout, final, unit),
            tool_section_budget=policy.tool_section_budget,
            more_available=more if tools_more is not None and tools_more.id in final else 0,
            usage_window_start=window_start, usage_window_end=now, max_usage=max_usage,
            tools=_tool_ranks(ranked, {line.id for line in tool_lines if line.id in final}))
        return engine.finish(
            profile=self.name, policy_version=policy.version, session=view.stream_id,
            position=view.position, now=now, pieces=pieces,
            messages=[Composed(policy.context_role, pieces)],
            overhead=policy.message_overhead, sections=sections,
            report=report, warnings=warnings,
            format_version=format_for(format_7=ranking.registry_order))

    def render(self, assembly: Assembly) -> RenderableType:
        """The ranked tools with their scores, window usage and whether they were shown."""
        from ctxledger.assembler.profiles.session.breakdown import session_table

        return session_table(report_of(assembly, SessionReport))



def _previous_section(engine: Engine, prior: PreviousSession | None, policy: SessionPolicy
                      ) -> tuple[Candidate | None, Candidate | None]:
    """The previous session's heading and summary, included when it has a summary."""
    if prior is None or not prior.summary:
        return None, None
    frame = engine.candidate(f"section:{SECTION_PREVIOUS}", SECTION_PREVIOUS,
                             policy.previous_heading)
    previous = engine.candidate(f"previous_session:{prior.stream_id}", SECTION_PREVIOUS,
                                prior.summary)
    engine.include(frame, "section_has_content")
    engine.include(previous, "previous_session_summary", ended_at=prior.ended_at,
                   position=prior.position)
    return frame, previous


def _tool_ranks(ranked: Sequence[RankedEntry], shown: set[str]) -> list[ToolRank]:
    """The report's row of each ranked tool (``shown``: the ids of the lines kept)."""
    return [ToolRank(entry=item.entry.id, name=item.entry.name,
                     tool_type=item.entry.tool_type, rank=item.rank, score=item.score,
                     window_count=item.usage.window_count,
                     window_last_used=_utc_or_none(item.usage.window_last_used),
                     age_days=item.age_days, lifetime_count=item.usage.lifetime_count,
                     shown=item.entry.id in shown)
            for item in ranked]

def _utc_or_none(value: datetime | None) -> datetime | None:
    return None if value is None else ensure_utc(value)


# -- candidates ----------------------------------------------------------------------------


def _observation_groups(engine: Engine, observations: Sequence[Observation], now: datetime,
                        policy: SessionPolicy) -> list[_Group]:
    groups: list[_Group] = []
    for spec in policy.groups:
        chosen = sorted((item for item in observations if item.kind == spec.kind),
                        key=lambda item: (-item.position, item.stream_id))
        if not chosen:
            continue
        frame = engine.candidate(f"section:{spec.section}", spec.section, spec.heading)
        engine.include(frame, "section_has_content", observations=len(chosen))
        lines: list[Candidate] = []
        for observation in chosen:
            content_chars = text_length(one_line(observation.content), policy.length_unit)
            candidate = engine.candidate(f"observation:{observation.position}", spec.section,
                                         observation_line(observation, now, policy))
            lines.append(engine.include(
                candidate, "recent_observation", kind=observation.kind,
                recorded_at=observation.recorded_at, content_chars=content_chars,
                cut=content_chars > policy.observation_max_chars))
        groups.append(_Group(spec, frame, lines))
    kinds = {spec.kind for spec in policy.groups}
    for observation in sorted(observations, key=lambda item: item.position):
        if observation.kind not in kinds:
            candidate = engine.candidate(f"observation:{observation.position}", "observations",
                                         one_line(observation.content))
            engine.exclude(candidate, "rejected", "unknown_observation_kind",
                           kind=observation.kind)
    return groups


def observation_line(observation: Observation, now: datetime, policy: SessionPolicy) -> str:
    """``- CONTENT (RELATIVE_TIME)``: content on one line, cut at the policy's length."""
    content = cut(one_line(observation.content), policy.observation_max_chars,
                  unit=policy.length_unit)
    return f"- {content} ({relative_time(observation.recorded_at, now)})"


def tool_line(entry: ToolEntry, lifetime_count: int) -> str:
    """The seed's line format per tool type (without its global/project scope tag)."""
    usage = f" ({lifetime_count}x)" if lifetime_count > 0 else ""
    if entry.tool_type == "mcp_server":
        return f"- MCP: {entry.server or entry.name}{usage}"
    if entry.tool_type == "skill":
        description = f" - {one_line(entry.description)}" if entry.description else ""
        return f"- skill: {entry.name}{description}"
    if entry.tool_type == "plugin":
        return f"- plugin: {entry.name}"
    return f"- {entry.name}{usage}"


def _tool_section(engine: Engine, ranked: Sequence[RankedEntry], policy: SessionPolicy
                  ) -> tuple[Candidate | None, list[Candidate], Candidate | None, int]:
    """Admit ranked lines under the section budget, then ``(N more available)`` if it fits.

    Returns the heading, the kept lines, the overflow line (when it is in) and N.
    """
    if not ranked:
        return None, [], None, 0
    heading = policy.tools_heading
    candidates = [engine.candidate(item.entry.id, SECTION_TOOLS,
                                   tool_line(item.entry, item.usage.lifetime_count))
                  for item in ranked]
    details = {item.entry.id: {"rank": item.rank, "score": item.score,
                               "window_count": item.usage.window_count,
                               "lifetime_count": item.usage.lifetime_count,
                               "age_days": item.age_days, "usage_source": item.usage.source}
               for item in ranked}

    def section_chars(lines: Sequence[Candidate]) -> int:
        return text_length("\n".join([heading, *(line.text for line in lines)]),
                           policy.length_unit)

    kept = engine.admit_while_fits(candidates, limit=policy.tool_section_budget, unit="chars",
                                   measure=section_chars, reason_in="ranked_within_budget",
                                   reason_out="over_section_budget", details=details)
    more = len(candidates) - len(kept)
    overflow: Candidate | None = None
    if more:
        overflow = engine.candidate(f"{SECTION_TOOLS}:more", SECTION_TOOLS,
                                    f"({more} more available)")
        size = section_chars([*kept, overflow])
        if size <= policy.tool_section_budget:
            overflow = engine.include(overflow, "overflow_line_fits", more_available=more,
                                      size_with=size, limit=policy.tool_section_budget)
        else:
            engine.exclude(overflow, "dropped", "over_section_budget", more_available=more,
                           size_with=size, limit=policy.tool_section_budget)
            overflow = None
    frame = engine.candidate(f"section:{SECTION_TOOLS}", SECTION_TOOLS, heading)
    engine.include(frame, "section_has_content", lines=len(kept), more_available=more,
                   overflow_line=overflow is not None, budget=policy.tool_section_budget)
    return frame, kept, overflow, more if overflow is not None else 0


def _kept_candidates(layout: _Layout) -> list[Candidate]:
    kept: list[Candidate] = []
    if layout.previous_frame is not None and layout.previous is not None:
        kept += [layout.previous_frame, layout.previous]
    for group in layout.groups:
        kept += [group.frame, *group.lines]
    if layout.tools_frame is not None:
        kept += [layout.tools_frame, *layout.tool_lines]
        if layout.tools_more is not None:
            kept.append(layout.tools_more)
    return kept


def _trim_steps(layout: _Layout, policy: SessionPolicy) -> list[ShedStep]:
    steps: list[ShedStep] = []
    groups = {group.spec.kind: group for group in layout.groups}
    for step in policy.trim_order:
        if step == DROP_TOOLS:
            if layout.tools_frame is not None:
                more = (layout.tools_more,) if layout.tools_more is not None else ()
                steps.append(ShedStep((layout.tools_frame, *layout.tool_lines, *more)))
        elif step == SHORTEN_PREVIOUS:
            if layout.previous is not None and layout.previous_frame is not None:
                steps.append(ShedStep((layout.previous,),
                                      shrink=_summary_shortener(policy.length_unit),
                                      reason="over_total_budget_shortened"))
                steps.append(ShedStep((layout.previous_frame, layout.previous)))
        elif step in groups:
            group = groups[step]
            oldest_first = list(reversed(group.lines))
            for index, line in enumerate(oldest_first):
                last = index == len(oldest_first) - 1
                # The heading goes with the group's last line.
                steps.append(ShedStep((line, group.frame) if last else (line,)))
    return steps


def _summary_shortener(unit: LengthUnit) -> Callable[[Candidate, int], str]:
    """The shrink step shortening the previous summary by an overflow counted in ``unit``."""

    def shorten(candidate: Candidate, overflow: int) -> str:
        # Keep at least one character: a summary shortened to nothing is dropped instead.
        size = text_length(candidate.text, unit)
        return shorten_to(candidate.text, max(len(ELLIPSIS) + 1, size - overflow),
                          unit=unit)

    return shorten


# -- rendering -----------------------------------------------------------------------------


def _has_context(layout: _Layout, kept: Mapping[str, Candidate]) -> bool:
    if layout.previous is not None and layout.previous.id in kept \
            and kept[layout.previous.id].text:
        return True
    return any(line.id in kept for group in layout.groups for line in group.lines)


def _tool_section_chars(layout: _Layout, kept: Mapping[str, Candidate],
                        unit: LengthUnit) -> int:
    parts = [c for c in (layout.tools_frame, *layout.tool_lines, layout.tools_more)
             if c is not None and c.id in kept]
    return text_length("\n".join(kept[c.id].text for c in parts), unit)


def prompt_pieces(layout: _Layout, kept: Mapping[str, Candidate], welcome: Piece) -> list[Piece]:
    """The prompt as pieces for the kept candidates (by id): the context part (or the
    ``welcome`` piece), then the tool section."""
    if not _has_context(layout, kept):
        context: list[Piece] = [welcome]
    else:
        blocks: list[list[Piece]] = [[Frame(layout.header)]]
        if layout.previous is not None and layout.previous_frame is not None \
                and layout.previous.id in kept and kept[layout.previous.id].text:
            blocks.append([kept[layout.previous_frame.id],
                           Frame("\n", SECTION_PREVIOUS), kept[layout.previous.id]])
        for group in layout.groups:
            shown = [kept[line.id] for line in group.lines if line.id in kept]
            if shown:
                blocks.append(joined([[kept[group.frame.id]], *([line] for line in shown)],
                                     "\n", group.spec.section))
        context = joined(blocks, "\n\n")
    tools: list[Piece] = []
    if layout.tools_frame is not None and layout.tools_frame.id in kept:
        lines = [kept[line.id] for line in layout.tool_lines if line.id in kept]
        more = ([kept[layout.tools_more.id]]
                if layout.tools_more is not None and layout.tools_more.id in kept else [])
        tools = joined([[kept[layout.tools_frame.id]], *([line] for line in [*lines, *more])],
                       "\n", SECTION_TOOLS)
    return joined([context, tools], "\n\n")
