"""What a profile is: its policy, its report, the view it needs, how it assembles, and how
it shows an assembly to a person.

Adding a profile touches only its own module (or folder) and one line of the registry in
``assembler.profiles``: the engine, policies, api, digest, facade and CLI serve it as is.
A profile's report model registers itself (``assembler.report``); caches it wants saved
after assembling go through ``Engine.remember``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from datetime import datetime
from typing import TYPE_CHECKING, Any, ClassVar

from ctxledger.assembler.decision_engine import Engine
from ctxledger.assembler.inputs import Inputs
from ctxledger.assembler.model import Assembly
from ctxledger.assembler.policy import Policy
from ctxledger.assembler.report import ProfileReport
from ctxledger.assembler.tokens import TokenCounter
from ctxledger.projections.session_view import SessionView, ViewRequest

if TYPE_CHECKING:
    from rich.console import RenderableType


class Profile(ABC):
    """A way of assembling context, e.g. ``card`` or ``session``.

    Profiles are stateless: ``assemble`` is a pure function of its arguments, and every
    decision goes through the ``Engine`` it is given.
    """

    name: ClassVar[str]
    policy_type: ClassVar[type[Policy]]
    report_type: ClassVar[type[ProfileReport]]
    inputs: ClassVar[Inputs]
    """The events that change what it assembles from (``assembler.inputs``): a timeline
    steps on each of them and on no other."""
    shows_state: ClassVar[bool] = False
    """True for a profile with a state section, which an agent's manifest scopes
    (``assemble --agent``); no profile filters anything else by agent."""

    @abstractmethod
    def request(self, policy: Policy, now: datetime, counter: TokenCounter) -> ViewRequest:
        """What the read view must hold for an assembly under ``policy`` at ``now``.

        ``counter`` counts tokens as the assembly will, for a request that measures what
        it loads (a history window).
        """

    @abstractmethod
    def assemble(self, engine: Engine, view: SessionView, now: datetime,
                 policy: Policy) -> Assembly:
        """Build the assembly (``policy`` is an instance of ``policy_type``)."""

    def render(self, assembly: Assembly) -> RenderableType:
        """A rich view of ``assembly`` for people (``--format text``): by default, its
        text. Profiles show their breakdown instead."""
        from rich.text import Text

        return Text(assembly.text)


def report_of(assembly: Assembly, report_type: type[Any]) -> Any:
    """``assembly.report`` checked to be a ``report_type`` (a profile's own report)."""
    report = assembly.report
    if not isinstance(report, report_type):
        raise TypeError(f"{assembly.profile} assembly has a {type(report).__name__} report, "
                        f"not a {report_type.__name__}")
    return report
