"""Which events change what a profile assembles from: its ``Inputs`` declaration.

A profile declares, once, the event types that change its read view, by the stream they
are in: the session's own, its scope's (``scope:<S>``), or the scope's other sessions'
(``peers``: a tool use in another session of the scope changes the ``session``
profile's ranking). A timeline (``replay --timeline``, ``why``, a what-if) assembles after
each such event and after no other, so it steps exactly where the live assembly could
differ. A setting change counts for every profile: settings give its policy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Where = Literal["session", "scope", "peer"]
"""The stream an event is in, seen from the session being assembled."""

SETTING_EVENTS: frozenset[str] = frozenset({"setting.changed"})
"""Settings (a session override, a scope default) give every profile's policy."""


@dataclass(frozen=True, slots=True)
class Inputs:
    """The event types whose events change a profile's inputs, by stream."""

    session: frozenset[str] = frozenset()
    """In the session's own stream."""
    scope: frozenset[str] = frozenset()
    """In the stream of the session's scope."""
    peers: frozenset[str] = frozenset()
    """In the streams of the scope's other sessions. Non-empty only for a profile whose
    view request reads other sessions' state (``ViewRequest.reads_other_sessions``):
    only then does a replay read those streams."""

    def changed_by(self, event_type: str, where: Where) -> bool:
        """True when an event of ``event_type`` in that stream changes the inputs."""
        if where == "session":
            return event_type in self.session or event_type in SETTING_EVENTS
        if where == "scope":
            return event_type in self.scope or event_type in SETTING_EVENTS
        return event_type in self.peers
