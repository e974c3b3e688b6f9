"""What a profile hands the engine: candidates (items that may go into the context), the
pieces of the prompt (kept candidates and ``Frame`` texts) laid out by section, and the
same context as messages (``Said`` chat messages and ``Composed`` ones)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from ctxledger.projections.session_view import Message
from ctxledger.store.chat import ChatRole

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
    frame = Frame(separator, section)  # immutable: one object serves every gap
    for part in parts:
        if not part:
            continue
        if out:
            out.append(frame)
        out.extend(part)
    return out


def interleaved(pieces: Sequence[Piece], separator: str,
                section: str | None = None) -> list[Piece]:
    """``joined`` of one piece each: ``pieces`` with a ``Frame(separator)`` between
    every two (built by slices: a long history's lines are many)."""
    if not pieces:
        return []
    out: list[Piece] = [Frame(separator, section)] * (2 * len(pieces) - 1)
    out[0::2] = pieces
    return out


@dataclass(frozen=True, slots=True)
class Said:
    """A kept chat message of the log, sent as it is stored; its candidate's tokens are
    its cost as sent. ``as_text`` sends it instead as a message of that role holding the
    candidate's text (an unpaired tool result goes as a user message)."""

    candidate: Candidate
    message: Message
    as_text: ChatRole | None = None


@dataclass(frozen=True, slots=True)
class Composed:
    """A message the profile builds: its content is its pieces' texts joined, its cost
    their tokens plus the message's wrapper. With ``exact``, the cost is the count of the
    joined content itself (a join may merge tokens), as a chat API counts it; without,
    the sum of the pieces' counts, which needs no count of the whole (a long context
    that changes every turn). An empty one is not sent."""

    role: ChatRole
    pieces: Sequence[Piece]
    exact: bool = False


Outgoing = Said | Composed
"""One message of the context, in order."""
