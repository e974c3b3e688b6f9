"""What a profile is: a policy type, the view it needs, and how it assembles."""

from __future__ import annotations

from abc import ABC, abstractmethod
from datetime import datetime
from typing import ClassVar

from assembler.engine import Engine
from assembler.model import Assembly
from assembler.policy import Policy
from projections.view import SessionView, ViewRequest


class Profile(ABC):
    """A way of assembling context, e.g. ``card`` or ``session``.

    Profiles are stateless: ``assemble`` is a pure function of its arguments, and every
    decision goes through the ``Engine`` it is given.
    """

    name: ClassVar[str]
    policy_type: ClassVar[type[Policy]]

    @abstractmethod
    def request(self, policy: Policy, now: datetime) -> ViewRequest:
        """What the read view must hold for an assembly under ``policy`` at ``now``."""

    @abstractmethod
    def assemble(self, engine: Engine, view: SessionView, now: datetime,
                 policy: Policy) -> Assembly:
        """Build the assembly (``policy`` is an instance of ``policy_type``)."""
