"""Profile ``novel``: tiered hot/warm/cold context with the sandwich layout.

Rules (SPEC §3 "Profile novel"):

- Items are the session's ``item.put`` items; the current chapter is the last
  ``chapter.moved``, and 1 before any.
- Tiers: hot = exemplar, anti_exemplar, scene_plan, emotional_directive, characters in the
  scene, relationship states in the scene (*promoted*); warm = summaries inside the window
  ``current − warm_window <= chapter < current``, other relationship states, active
  foreshadowing, plot, style; cold = everything else (world, act_summary, summaries
  outside the window, inactive foreshadowing, characters not in the scene). A summary
  with no chapter, or with chapter >= current, is cold with priority 1. With several
  scene plans the latest put is the scene plan; the others are cold.
- Priorities come from the policy's table; within a tier items rank by priority
  descending, then put order, then item_id (a total order). Dropping goes from the end
  of that order, so equal priorities drop the latest put first and what stays is the
  longest prefix that fits (an item is never skipped to keep a later one).
- Budgets per tier (15000/25000/40000 tokens). Hot over budget: emotional directives go
  first (lowest priority first), then promoted relationship states; scene plans,
  exemplars, anti-exemplars and characters are never dropped: if still over, everything
  stays, the tier overshoots and the assembly warns. Anti-exemplars are never dropped
  in hot either. Warm and cold over budget: the lowest priority goes first. Nothing is
  ever shortened, characters least of all.
- Sandwich: prefix = the scene plan, then the first exemplar; suffix = the remaining
  exemplars, then anti-exemplars, then emotional directives, then promoted relationship
  states, then characters (in the suffix, before the characters). Prompt
  order: prefix, cold, warm, suffix. With two or more exemplars one is in the prefix and
  the others in the suffix.
- Framing: the separator before an item belongs to that item's section (so to its
  tier); tier totals include it, tier budgets are checked with it, and the stats line
  adds up to the assembly's total.
- The stats line: ``Hot: X/15000 tokens (N items) | Warm: X/25000 (N items) | Cold:
  X/40000 (N items) | Total: X/80000``.

Where each rule lives: ``tiers`` (tier placement, what hot may drop), ``priorities``
(priority and rank), ``sandwich`` (sections and their order), ``policy`` (budgets, the
priority table); the assembly itself is a ``book.BookState`` kept across assemblies,
its tiers ``ranked`` lists with a cut, ``shed`` their range decisions, ``prepared`` an
item under its context, ``readout`` the sections, report and seal.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, ClassVar

from ctxledger.assembler.decision_engine import Engine
from ctxledger.assembler.inputs import Inputs
from ctxledger.assembler.model import Assembly
from ctxledger.assembler.policy import Policy
from ctxledger.assembler.profiles.base import Profile, report_of
from ctxledger.assembler.profiles.novel.policy import NovelPolicy
from ctxledger.assembler.profiles.novel.report import NovelReport
from ctxledger.assembler.report import ProfileReport
from ctxledger.assembler.tokens import TokenCounter
from ctxledger.projections.session_view import SessionView, ViewRequest

if TYPE_CHECKING:
    from rich.console import RenderableType


class NovelProfile(Profile):
    """The ``novel`` profile."""

    name: ClassVar[str] = "novel"
    policy_type: ClassVar[type[Policy]] = NovelPolicy
    report_type: ClassVar[type[ProfileReport]] = NovelReport
    inputs: ClassVar[Inputs] = Inputs(session=frozenset({
        "item.put", "item.removed", "chapter.moved"}))

    def request(self, policy: Policy, now: datetime, counter: TokenCounter) -> ViewRequest:
        """The session's context items (the chapter is always in the view)."""
        assert isinstance(policy, NovelPolicy)
        return ViewRequest(now=now, items=True)

    def assemble(self, engine: Engine, view: SessionView, now: datetime,
                 policy: Policy) -> Assembly:
        """Tier, rank and fit the items, then lay them out as a sandwich: the session's
        kept ``BookState`` brought up to the view by what changed (a new one, built from
        every item, without a memo or under another policy)."""
        from ctxledger.assembler.profiles.novel.assemble import assemble_book

        assert isinstance(policy, NovelPolicy)
        return assemble_book(engine, view, now, policy)

    def render(self, assembly: Assembly) -> RenderableType:
        """Items by tier (rank order) with priority, tokens and placement; the stats line."""
        from ctxledger.assembler.profiles.novel.breakdown import novel_table

        return novel_table(report_of(assembly, NovelReport))
