"""Inline SVG charts drawn on the server: the timeline's stacked token chart and the
scope page's sparklines.

Hand-written rather than a charting library: two chart shapes of a few dozen lines each,
no JavaScript, nothing to load at run time (the view must work offline), and the markup is
ours to label for screen readers. Every number is rounded to one decimal so the markup is
the same on every machine.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from markupsafe import Markup, escape

from ctxledger.timetravel._markers import TimelineChart

PALETTE = ("#4e79a7", "#f28e2b", "#59a14f", "#b07aa1", "#76b7b2", "#edc948", "#ff9da7",
           "#9c755f", "#bab0ac", "#e15759")
"""Tableau 10, colour-blind friendly; sections take colours in prompt order."""
MARKER_COLOURS = {"expired": "#b22222", "summary": "#1f6feb", "lore": "#8250df"}
MARKER_SHAPES = {"expired": "✕", "summary": "▼", "lore": "◆"}


def _n(value: float) -> str:
    text = f"{value:.1f}"
    return text[:-2] if text.endswith(".0") else text


@dataclass(frozen=True, slots=True)
class Legend:
    """A section and its colour (the chart's key)."""

    name: str
    colour: str


def legend(chart: TimelineChart) -> list[Legend]:
    """The colour of each section, in prompt order."""
    return [Legend(name, PALETTE[i % len(PALETTE)]) for i, name in enumerate(chart.sections)]


def timeline_svg(chart: TimelineChart, *, href: str, why_href: Callable[[str], str],
                 selected: int | None = None,
                 width: int = 960, height: int = 240) -> Markup:
    """The stacked chart: one column per step (tokens per section, bottom up in prompt
    order), a marker above the steps where something happened, the selected step outlined.

    Each column is a link to ``href`` + its step number (``?step=N``), each marker a link
    to the ``why`` of its item (``why_href``); columns are left out of the tab order
    (there may be thousands: the step form and the steps table serve the keyboard),
    markers are in it."""
    steps = chart.steps
    pad_left, pad_top, pad_bottom = 48, 26, 22
    plot_w, plot_h = width - pad_left - 8, height - pad_top - pad_bottom
    top = max((s.total for s in steps), default=0) or 1
    col = plot_w / max(len(steps), 1)
    colours = {item.name: item.colour for item in legend(chart)}
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="timeline-chart" role="img" '
             f'viewBox="0 0 {width} {height}" width="100%" '
             f'aria-labelledby="chart-title chart-desc" data-steps="{len(steps)}">',
             '<title id="chart-title">Tokens per section at each step</title>',
             f'<desc id="chart-desc">{len(steps)} of {chart.total_steps} steps; '
             f'the tallest is {top} tokens. '
             f'{len(chart.markers)} markers.</desc>']
    for fraction in (0.0, 0.5, 1.0):  # the y axis: 0, half and the top
        y = pad_top + plot_h * (1 - fraction)
        parts.append(f'<line class="grid" x1="{pad_left}" x2="{width - 8}" y1="{_n(y)}" '
                     f'y2="{_n(y)}"/><text class="axis" x="{pad_left - 6}" y="{_n(y + 4)}" '
                     f'text-anchor="end">{round(top * fraction)}</text>')
    for index, step in enumerate(steps):
        x = pad_left + index * col
        label = (f"step {step.step}: message {step.message}" if step.message_id
                 else f"step {step.step}: {step.event_type}") + f", {step.total} tokens"
        parts.append(f'<a href="{escape(href)}{step.step}" tabindex="-1" class="step" '
                     f'data-step="{step.step}" aria-label="{escape(label)}">'
                     f'<title>{escape(label)}</title>')
        # A transparent full-height hit area: a thin column is still easy to click.
        parts.append(f'<rect class="hit" x="{_n(x)}" y="{pad_top}" width="{_n(max(col, 1))}" '
                     f'height="{plot_h}"/>')
        bottom: float = pad_top + plot_h
        for name, tokens in step.sections:
            h = plot_h * tokens / top
            bottom -= h
            parts.append(f'<rect x="{_n(x)}" y="{_n(bottom)}" width="{_n(max(col - 0.3, 0.5))}"'
                         f' height="{_n(h)}" fill="{colours[name]}"/>')
        parts.append("</a>")
        if selected == step.step:
            parts.append(f'<rect class="selected" x="{_n(x - 1)}" y="{pad_top - 2}" '
                         f'width="{_n(max(col, 1) + 2)}" height="{plot_h + 4}"/>')
    index_of = {step.step: i for i, step in enumerate(steps)}
    stacked: dict[int, int] = {}
    for marker in chart.markers:
        i = index_of[marker.step]
        level = stacked.get(i, 0)
        stacked[i] = level + 1
        x = pad_left + (i + 0.5) * col
        y = pad_top - 6 - 12 * (level % 2)
        text = f"step {marker.step}: {marker.label}"
        parts.append(f'<a href="{escape(why_href(marker.item))}" '
                     f'class="marker marker-{marker.kind}" data-item="'
                     f'{escape(marker.item)}" data-step="{marker.step}" '
                     f'aria-label="{escape(text)}"><title>{escape(text)}</title>'
                     f'<text x="{_n(x)}" y="{_n(y)}" text-anchor="middle" '
                     f'fill="{MARKER_COLOURS[marker.kind]}">{MARKER_SHAPES[marker.kind]}</text>'
                     f'<line x1="{_n(x)}" x2="{_n(x)}" y1="{_n(y + 2)}" y2="{pad_top + plot_h}" '
                     f'stroke="{MARKER_COLOURS[marker.kind]}" class="marker-line"/></a>')
    if steps:
        parts.append(f'<text class="axis" x="{pad_left}" y="{height - 6}">step '
                     f'{steps[0].step}</text><text class="axis" x="{width - 8}" '
                     f'y="{height - 6}" text-anchor="end">step {steps[-1].step}</text>')
    parts.append("</svg>")
    return Markup("".join(parts))


def sparkline(values: Sequence[int], *, label: str, width: int = 160,
              height: int = 32) -> Markup:
    """A small line of ``values`` (oldest first) with its last point dotted; labelled."""
    top = max(values, default=0) or 1
    step = (width - 4) / max(len(values) - 1, 1)
    points = [(2 + i * step, height - 3 - (height - 6) * v / top) for i, v in enumerate(values)]
    path = " ".join(f"{_n(x)},{_n(y)}" for x, y in points)
    last = points[-1] if points else (2.0, float(height - 3))
    return Markup(
        f'<svg xmlns="http://www.w3.org/2000/svg" class="sparkline" role="img" '
        f'width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
        f'aria-label="{escape(label)}"><title>{escape(label)}</title>'
        f'<polyline fill="none" points="{path}"/>'
        f'<circle cx="{_n(last[0])}" cy="{_n(last[1])}" r="2"/></svg>')
