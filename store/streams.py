"""Stream ids and their kinds: ``scope:<name>``, ``system``, or a session.

Kept apart from the event catalog so that readers (projections, the CLI's read commands)
can classify a stream without building the catalog's pydantic models.
"""

from __future__ import annotations

from typing import Literal

StreamKind = Literal["session", "scope", "system", "any"]

SCOPE_PREFIX = "scope:"
SYSTEM_STREAM = "system"


def stream_kind(stream_id: str) -> StreamKind:
    """Classify a stream id: ``scope:<name>``, ``system``, or a session stream."""
    if stream_id.startswith(SCOPE_PREFIX):
        return "scope"
    if stream_id == SYSTEM_STREAM:
        return "system"
    return "session"
