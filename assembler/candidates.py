"""What a profile hands the engine: candidates (items that may go into the context) and
the pieces of the prompt (kept candidates and ``Frame`` texts), laid out by section."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

Unit = Literal["tokens", "chars"]
"""What a budget counts."""


@dataclass(frozen=True, slots=True)
class Candidate:
    """Something that may go into the context: an item with its text and size."""

    id: str
    section: str
    text: str
    tokens: int
    tier: str | None = None
    priority: int | None = None

    @property
    def chars(self) -> int:
        """Length of ``text`` in characters."""
        return len(self.text)

    def size(self, unit: Unit) -> int:
        """Its size in ``unit``."""
        return self.tokens if unit == "tokens" else self.chars


@dataclass(frozen=True, slots=True)
class Frame:
    """Text of the prompt that belongs to no item: a header, a separator, a template's
    literal words. ``section`` attributes its tokens to a section (None: the context)."""

    text: str
    section: str | None = None


Piece = Candidate | Frame
"""One part of the rendered prompt, in order."""


@dataclass(frozen=True, slots=True)
class SectionLayout:
    """A section as laid out in the prompt: its name, tier and order among sections."""

    name: str
    tier: str | None = None


def joined(parts: Iterable[Sequence[Piece]], separator: str,
           section: str | None = None) -> list[Piece]:
    """The non-empty ``parts`` one after another with a ``Frame(separator)`` between."""
    out: list[Piece] = []
    for part in parts:
        if not part:
            continue
        if out:
            out.append(Frame(separator, section))
        out.extend(part)
    return out
