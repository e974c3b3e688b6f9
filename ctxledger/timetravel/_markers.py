"""What changed between a timeline's steps: where a field expired, a summary landed or a
lorebook entry fired (the browser view's timeline markers, ``Ledger.timeline_chart``).

A marker is read off the decisions of two consecutive steps, never off the profile's
internals: an item whose decision became ``expired``, a summary item (its section or id
names a summary) or a lorebook entry (``lore:...``) that became kept. So every profile
gets markers, and a marker is exactly what ``why`` of its item will explain.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from ctxledger.assembler.model import KEPT_ACTIONS, Assembly
from ctxledger.timetravel._audit import ABSENT
from ctxledger.timetravel._replay import TimelineStep

MarkerKind = Literal["expired", "summary", "lore"]


@dataclass(frozen=True, slots=True)
class Marker:
    """One event on the timeline: at ``step``, ``item`` did what ``kind`` says."""

    step: int
    kind: MarkerKind
    item: str
    label: str


@dataclass(frozen=True, slots=True)
class ChartStep:
    """One step of the timeline as the chart draws it: its tokens per section."""

    step: int
    message: int
    position: int
    event_type: str
    message_id: str | None
    total: int
    sections: tuple[tuple[str, int], ...]
    """``(section, tokens)`` in prompt order; sections of no tokens are left out."""


@dataclass(frozen=True, slots=True)
class TimelineChart:
    """A timeline reduced to what its chart shows (no assemblies kept)."""

    steps: tuple[ChartStep, ...]
    sections: tuple[str, ...]
    """Every section of any step, in the order first seen (prompt order)."""
    markers: tuple[Marker, ...]
    total_steps: int = 0
    """The whole timeline's steps (``steps`` may be a window of them)."""


def _is_summary(item: str, section: str) -> bool:
    return "summary" in section or item.startswith("summary")


def _states(assembly: Assembly) -> dict[str, tuple[str, str]]:
    return {d.item: (d.action, d.section) for d in assembly.decisions}


def decision_changes(before: Mapping[str, tuple[str, str]], after: Assembly
                     ) -> tuple[dict[str, tuple[str, str]], list[dict[str, str]]]:
    """The decisions of ``after`` as ``item -> (action, reason)``, and those that differ
    from ``before`` (new, changed, or gone: ``absent``), by item. A timeline's reader
    keeps only the map of the step before, never its assembly."""
    now: dict[str, tuple[str, str]] = {d.item: (d.action, d.reason) for d in after.decisions}
    changed = [{"item": item, "action": action, "reason": reason}
               for item, (action, reason) in now.items() if before.get(item) != (action,
                                                                                 reason)]
    changed += [{"item": item, "action": ABSENT[0], "reason": ABSENT[1]}
                for item in before.keys() - now.keys()]
    return now, sorted(changed, key=lambda c: c["item"])


def step_markers(step: int, before: Assembly | None, after: Assembly) -> list[Marker]:
    """The markers of the step that turned ``before`` into ``after``, by item."""
    old = _states(before) if before is not None else {}
    found: list[Marker] = []
    for item, (action, section) in _states(after).items():
        was = old.get(item, ("", ""))[0]
        if action == "expired" and was != "expired":
            found.append(Marker(step, "expired", item, f"{item} expired"))
        elif action in KEPT_ACTIONS and was not in KEPT_ACTIONS:
            if item.startswith("lore:"):
                found.append(Marker(step, "lore", item, f"{item} fired"))
            elif _is_summary(item, section):
                found.append(Marker(step, "summary", item, f"summary landed ({item})"))
    # Explicit order: by kind, then item (decisions come in the profile's order).
    return sorted(found, key=lambda m: (m.kind, m.item))


def timeline_chart(steps: Iterable[TimelineStep], total: int | None = None, *,
                   first: int = 1) -> TimelineChart:
    """The chart of ``steps``: tokens per section at each step, and the markers. Steps
    numbered before ``first`` are not drawn; the last of them is what the first drawn
    step's markers compare with. ``total``: the whole timeline's steps. ``steps`` is read
    once; only the step before is kept of each."""
    chart: list[ChartStep] = []
    markers: list[Marker] = []
    sections: dict[str, None] = {}
    before: Assembly | None = None
    count = 0
    for step in steps:
        count += 1
        a = step.assembly
        if step.step < first:
            before = a
            continue
        parts = tuple((name, tokens) for name, tokens in a.tokens.sections.items() if tokens)
        for name in a.tokens.sections:
            sections.setdefault(name, None)
        chart.append(ChartStep(step=step.step, message=step.message, position=step.position,
                               event_type=step.event_type, message_id=step.message_id,
                               total=a.tokens.total, sections=parts))
        markers += step_markers(step.step, before, a)
        before = a
    return TimelineChart(tuple(chart), tuple(sections), tuple(markers),
                         count if total is None else total)
