"""How candidates count against a budget (``Measure``, ``Additive``) and the steps of a
shedding order (``ShedStep``): the terms of the engine's ``admit_while_fits`` and
``shed_until_fits``. Budgets are in tokens or characters (``Unit``); a profile can measure
a sum of items or the length of the text it would render."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ctxledger.assembler.candidates import Candidate, Unit

Measure = Callable[[Sequence[Candidate]], int]
"""The size that counts against a budget, given the candidates currently kept."""


@dataclass(frozen=True, slots=True)
class Additive:
    """A ``Measure`` that is a sum: the kept candidates' sizes in ``unit``, plus
    ``per_item`` for each (e.g. a separator's tokens), less ``first_free`` once when
    anything is kept (e.g. the prompt's first item has no separator before it).

    Because removing or adding items changes it by their own share only, the budget
    helpers update it by difference instead of re-measuring everything kept at each step
    (a 5,000-item tier would otherwise cost quadratic time).
    """

    unit: Unit
    per_item: int = 0
    first_free: int = 0

    def __call__(self, kept: Sequence[Candidate]) -> int:
        """The size of ``kept``."""
        if not kept:
            return 0
        return (sum(candidate.size(self.unit) for candidate in kept)
                + self.per_item * len(kept) - self.first_free)

    def share(self, candidate: Candidate) -> int:
        """What ``candidate`` adds to a non-empty total."""
        return candidate.size(self.unit) + self.per_item


def total_of(unit: Unit) -> Measure:
    """A ``Measure`` summing the kept candidates' sizes in ``unit``."""
    return Additive(unit)


Shrink = Callable[[Candidate, int], str]
"""Given a candidate and the overflow (in the budget's unit), its shortened text."""


@dataclass(frozen=True, slots=True)
class ShedStep:
    """One step of a shedding order: drop ``items`` together, or shorten one of them."""

    items: tuple[Candidate, ...]
    shrink: Shrink | None = None
    """When set, the (single) item is shortened to fit instead of dropped."""
    reason: str | None = None
    """Overrides the shed's reason code for this step."""


@dataclass(frozen=True, slots=True)
class ShedResult:
    """What is left after shedding and whether it fits."""

    kept: list[Candidate]
    size: int
    fits: bool
