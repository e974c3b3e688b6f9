"""Sanitizing retrieved text: instruction-like phrases removed, banned terms redacted.

Every change is reported with the pattern's name and its span in the original text, so
one ``rewrite`` decision can record all of a snippet's removals (lists of patterns and
spans). Removals win over redactions where they overlap.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from ctxledger.assembler.profiles.brief.policy import BriefPolicy

BANNED = "banned_term"


@dataclass(frozen=True, slots=True)
class Change:
    """One removal (``replacement`` empty) or redaction, as a span of the original."""

    pattern: str
    start: int
    end: int
    replacement: str


@dataclass(frozen=True, slots=True)
class Sanitized:
    """The cleaned text and what was changed to get it."""

    text: str
    changes: tuple[Change, ...]


class Sanitizer:
    """The policy's patterns, compiled once."""

    def __init__(self, policy: BriefPolicy) -> None:
        self._injections = [(item.name, re.compile(item.regex)) for item in policy.injections]
        terms = sorted(set(policy.banned_terms), key=lambda term: (-len(term), term))
        self._banned = (re.compile("|".join(re.escape(term) for term in terms), re.IGNORECASE)
                        if terms else None)
        self._redaction = policy.redaction

    def clean(self, text: str) -> Sanitized:
        """``text`` without injections and with banned terms redacted."""
        removals = sorted((Change(name, m.start(), m.end(), "")
                           for name, pattern in self._injections
                           for m in pattern.finditer(text) if m.end() > m.start()),
                          key=lambda c: (c.start, c.end, c.pattern))
        redactions = [] if self._banned is None else [
            Change(BANNED, m.start(), m.end(), self._redaction)
            for m in self._banned.finditer(text)
            if not any(r.start < m.end() and m.start() < r.end for r in removals)]
        changes = tuple(sorted([*removals, *redactions],
                               key=lambda c: (c.start, c.end, c.pattern)))
        if not changes:
            return Sanitized(text, ())
        return Sanitized(_apply(text, changes), changes)


def _apply(text: str, changes: Sequence[Change]) -> str:
    out: list[str] = []
    at = 0
    for change in changes:
        if change.start >= at:
            out.append(text[at:change.start])
            out.append(change.replacement)
            at = change.end
        elif change.end > at:  # overlapping removals: extend the one already cut
            at = change.end
    out.append(text[at:])
    # What a removal leaves behind: runs of spaces on a line, and blank edges.
    lines = [" ".join(line.split()) for line in "".join(out).splitlines()]
    return "\n".join(line for line in lines if line).strip()


def change_detail(changes: Sequence[Change]) -> dict[str, list[str] | list[int]]:
    """The decision numbers: patterns and spans (start, end in the original), in order."""
    return {"patterns": [c.pattern for c in changes], "starts": [c.start for c in changes],
            "ends": [c.end for c in changes]}
