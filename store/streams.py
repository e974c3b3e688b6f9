"""Stream ids and their kinds: ``scope:<name>``, ``system``, or a session.

Kept apart from the event catalog so that readers (projections, the CLI's read commands)
can classify a stream without building the catalog's pydantic models.
"""

from __future__ import annotations

from typing import Literal

from ctxledger.store.errors import EventValidationError
from ctxledger.store.printable import unprintable_problem
from ctxledger.store.strict import check_text

StreamKind = Literal["session", "scope", "system", "any"]

SCOPE_PREFIX = "scope:"
DEFAULT_SCOPE = "default"
"""The scope of a session whose ``session.started`` names none, and of a session's events
before its first ``session.started``."""
SYSTEM_STREAM = "system"
MAX_STREAM_ID = 200


def check_stream_id(stream_id: str) -> None:
    """Raise ``EventValidationError`` unless ``stream_id`` can name a stream: a non-blank
    string of at most ``MAX_STREAM_ID`` characters that the database can store and a
    terminal can print (no control, format or line-separator character)."""
    if not isinstance(stream_id, str) or not stream_id.strip():
        raise EventValidationError("stream id must be a non-empty string")
    if len(stream_id) > MAX_STREAM_ID:
        raise EventValidationError(f"stream id is longer than {MAX_STREAM_ID} characters")
    check_text(stream_id, "stream id")
    problem = unprintable_problem(stream_id)
    if problem is not None:
        raise EventValidationError(f"stream id contains {problem}")


def stream_kind(stream_id: str) -> StreamKind:
    """Classify a stream id: ``scope:<name>``, ``system``, or a session stream."""
    if stream_id.startswith(SCOPE_PREFIX):
        return "scope"
    if stream_id == SYSTEM_STREAM:
        return "system"
    return "session"
