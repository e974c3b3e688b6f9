"""The benchmark's building blocks: legs, the figures they measure, and their targets.

A *leg* is one measured scenario (for example single-event appends). It runs ctxledger
and its peers side by side and returns one ``Comparison`` per target it checks. Legs
register themselves with ``@leg(...)``; ``run.py`` runs every registered leg in
registration order, so a later issue adds a leg by adding a module, not by editing the
runner.
"""

from __future__ import annotations

import statistics
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from workload import MixEvent


@dataclass(frozen=True)
class Settings:
    """Sizes and repetitions of one benchmark run."""

    events: int
    """Size of the mix: batches and rebuild use all of it."""
    single_events: int
    """How many of the mix's first events the single-append legs write, one per commit."""
    batch_size: int
    rounds: int
    """Each leg runs this many times, peers interleaved; the median is reported."""
    quick: bool
    turns: int = 5_000
    """Chat turns of the turn-loop leg (ctxledger)."""
    peer_turns: int = 2_000
    """Chat turns of the turn-loop leg's peer (LangGraph stores the whole state per
    checkpoint: its database grows with the square of the turns)."""
    rollup_events: int = 300_000
    """Size of the log the rollup leg rolls up (30 days of it)."""
    replay_log: int = 250_000
    """Events in the large log of the replay leg."""
    checkpoint_steps: int = 2_000
    """Steps of the langgraph leg's chat graph (each checkpointer)."""
    bounded_messages: int = 5_000
    """Messages of the session whose timeline and ``why`` the bounded leg asks for."""
    timeline_why: int = 10_000
    """Messages of the live turns the timeline leg asks ``why`` over."""
    timeline_messages: int = 2_000
    """Messages of the timeline leg's long timeline (no context limit)."""
    timeline_records: int = 1_000
    """Recorded assemblies the timeline leg audits."""


@dataclass
class Context:
    """What every leg gets: the settings, the mix, and fresh scratch directories."""

    settings: Settings
    mix: list[MixEvent]
    scratch_root: Path
    _count: int = 0

    @contextmanager
    def fresh_dir(self, label: str) -> Iterator[Path]:
        """A new empty directory for one measurement, removed afterwards."""
        self._count += 1
        with tempfile.TemporaryDirectory(prefix=f"{self._count:03d}-{label}-",
                                         dir=self.scratch_root) as path:
            yield Path(path)


@dataclass(frozen=True)
class Measure:
    """One figure with its unit, and every round's value behind the median."""

    value: float
    unit: str
    rounds: tuple[float, ...] = ()

    @classmethod
    def median_of(cls, values: list[float], unit: str) -> Measure:
        """The median of ``values`` (one per round)."""
        return cls(statistics.median(values), unit, tuple(values))

    def format(self) -> str:
        """Human-readable value with its unit."""
        if self.unit == "ev/s":
            return f"{self.value:,.0f} ev/s"
        if self.unit == "s":
            return f"{self.value:.3f} s"
        return f"{self.value:,.4g} {self.unit}"


class Target(Protocol):
    """A quality bar from SPEC §7: describes itself and judges a figure."""

    def describe(self) -> str:
        """Short text for the table's target column."""
        ...

    def judge(self, ours: Measure, peer: Measure | None) -> tuple[float | None, bool]:
        """(ratio shown in the table or None, whether the target is met)."""
        ...


@dataclass(frozen=True)
class AtLeastTimesPeer:
    """ours / peer >= factor (rates: higher is better)."""

    factor: float

    def describe(self) -> str:
        """e.g. '>= 0.5x'."""
        return f">= {self.factor:g}x"

    def judge(self, ours: Measure, peer: Measure | None) -> tuple[float | None, bool]:
        """Ratio of the rates against the factor."""
        assert peer is not None and peer.value > 0
        ratio = ours.value / peer.value
        return ratio, ratio >= self.factor


@dataclass(frozen=True)
class FasterThanPeer:
    """ours / peer > 1 (rates: strictly more than the peer)."""

    def describe(self) -> str:
        """'> 1x'."""
        return "> 1x"

    def judge(self, ours: Measure, peer: Measure | None) -> tuple[float | None, bool]:
        """Ratio of the rates, strictly above one."""
        assert peer is not None and peer.value > 0
        ratio = ours.value / peer.value
        return ratio, ratio > 1.0


@dataclass(frozen=True)
class AtLeast:
    """An absolute floor, e.g. 150,000 ev/s."""

    floor: float
    unit: str

    def describe(self) -> str:
        """e.g. '>= 150,000 ev/s'."""
        return f">= {self.floor:,.0f} {self.unit}"

    def judge(self, ours: Measure, peer: Measure | None) -> tuple[float | None, bool]:
        """No ratio; compares the figure with the floor."""
        return None, ours.value >= self.floor


@dataclass(frozen=True)
class AtMost:
    """An absolute ceiling, e.g. 0.1 s for the seal an append may run."""

    ceiling: float
    unit: str

    def describe(self) -> str:
        """e.g. '<= 0.1 s'."""
        return f"<= {self.ceiling:g} {self.unit}"

    def judge(self, ours: Measure, peer: Measure | None) -> tuple[float | None, bool]:
        """No ratio; compares the figure with the ceiling."""
        return None, ours.value <= self.ceiling


@dataclass(frozen=True)
class AtMostTimesPeer:
    """ours / peer <= factor (times: lower is better), e.g. assembly at 100k vs 1k events."""

    factor: float

    def describe(self) -> str:
        """e.g. '<= 1.2x'."""
        return f"<= {self.factor:g}x"

    def judge(self, ours: Measure, peer: Measure | None) -> tuple[float | None, bool]:
        """Ratio of the times against the factor."""
        assert peer is not None and peer.value > 0
        ratio = ours.value / peer.value
        return ratio, ratio <= self.factor


@dataclass(frozen=True)
class AtMostTimesPeerPlus:
    """ours <= factor x peer + constant (memory: a multiple of a peer's, plus a stated
    allowance for what the peer does not hold). The ratio shown is ours over that bound."""

    factor: float
    constant: float
    unit: str

    def describe(self) -> str:
        """e.g. '<= 1.2x + 32 MB'."""
        return f"<= {self.factor:g}x + {self.constant:g} {self.unit}"

    def judge(self, ours: Measure, peer: Measure | None) -> tuple[float | None, bool]:
        """The figure against the bound (the ratio is ours / bound)."""
        assert peer is not None
        bound = self.factor * peer.value + self.constant
        return ours.value / bound, ours.value <= bound


@dataclass(frozen=True)
class TimesLessThanPeer:
    """peer / ours >= factor (times or sizes: lower is better), e.g. '>= 10x faster'.

    The ratio column shows peer / ours for these rows, the factor the target names."""

    factor: float
    word: str
    """What lower means: 'faster', 'smaller'."""

    def describe(self) -> str:
        """e.g. '>= 10x faster'."""
        return f">= {self.factor:g}x {self.word}"

    def judge(self, ours: Measure, peer: Measure | None) -> tuple[float | None, bool]:
        """How many times lower ours is than the peer's, against the factor."""
        assert peer is not None and ours.value > 0
        ratio = peer.value / ours.value
        return ratio, ratio >= self.factor


@dataclass(frozen=True)
class Exactly:
    """An exact count, e.g. 1 tokenizer call after one new message. The values behind the
    figure (``Measure.rounds``, e.g. one per history size) must all be exact too."""

    expected: float
    unit: str

    def describe(self) -> str:
        """e.g. '= 1 calls'."""
        return f"= {self.expected:g} {self.unit}"

    def judge(self, ours: Measure, peer: Measure | None) -> tuple[float | None, bool]:
        """No ratio; the figure and every value behind it must equal the expected count."""
        values = (ours.value, *ours.rounds)
        return None, all(value == self.expected for value in values)


@dataclass(frozen=True)
class Reported:
    """A figure reported for the table, with no bar of its own."""

    def describe(self) -> str:
        """'reported'."""
        return "reported"

    def judge(self, ours: Measure, peer: Measure | None) -> tuple[float | None, bool]:
        """The ratio when there is a peer; always met."""
        ratio = None if peer is None or peer.value <= 0 else ours.value / peer.value
        return ratio, True


@dataclass(frozen=True)
class Comparison:
    """One row of the result table."""

    leg: str
    label: str
    ours: Measure
    peer_name: str | None
    peer: Measure | None
    target: Target
    note: str = ""

    @property
    def ratio(self) -> float | None:
        """ours / peer (None for absolute targets)."""
        return self.target.judge(self.ours, self.peer)[0]

    @property
    def passed(self) -> bool:
        """True when the target is met."""
        return self.target.judge(self.ours, self.peer)[1]

    def as_json(self) -> dict[str, Any]:
        """Plain data for ``--json``."""
        return {
            "leg": self.leg, "label": self.label, "target": self.target.describe(),
            "ours": {"value": self.ours.value, "unit": self.ours.unit,
                     "rounds": list(self.ours.rounds)},
            "peer": None if self.peer is None else {
                "name": self.peer_name, "value": self.peer.value, "unit": self.peer.unit,
                "rounds": list(self.peer.rounds)},
            "ratio": self.ratio, "passed": self.passed, "note": self.note,
        }


@dataclass(frozen=True)
class Leg:
    """A registered scenario."""

    name: str
    title: str
    run: Callable[[Context], list[Comparison]]


LEGS: list[Leg] = []
"""Every registered leg, in registration order."""


def leg(name: str, title: str) -> Callable[[Callable[[Context], list[Comparison]]],
                                           Callable[[Context], list[Comparison]]]:
    """Register the decorated function as the leg ``name``."""

    def register(fn: Callable[[Context], list[Comparison]]
                 ) -> Callable[[Context], list[Comparison]]:
        if any(existing.name == name for existing in LEGS):
            raise ValueError(f"leg {name!r} is registered twice")
        LEGS.append(Leg(name, title, fn))
        return fn

    return register
