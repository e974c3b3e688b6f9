"""Derived event ids, in a module of its own: ``ctxledger hook`` derives a tool use's id
in a process that imports nothing but the standard library (see ``ctxledger._hook._spool``)."""

from __future__ import annotations

import uuid

_DERIVED_ID_NAMESPACE = uuid.UUID("7d1c2f0a-5b8e-4e1f-9c36-0a4b2d9e6f13")


def derived_event_id(*parts: str) -> str:
    """A stable event id for ``parts`` (a session and what in it the event records), so
    that writing the same thing again is an idempotent retry, not a second event."""
    return str(uuid.uuid5(_DERIVED_ID_NAMESPACE, "\x1f".join(parts)))
