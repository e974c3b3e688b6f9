"""Which events count toward their scope: the one rule for events a fork copied.

A fork (``ctxledger.timetravel._fork``) copies a session's prefix into a new session. The copies are
the original's history again, not new activity: unless the fork was made to count
(``fork_counts`` in their metadata), they make the new session's own state (its
messages, items, settings, card...) but add nothing to what the scope aggregates over
its sessions: tool usage, observations, the sessions that ended, the daily rollups.
Events appended to the fork afterwards are new and count like any other.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

FORKED_FROM = "forked_from"
"""Metadata key of a fork's copy: the session it was copied from."""
FORK_COUNTS = "fork_counts"
"""Metadata key set (to ``COUNTS``) on the copies of a fork made to count toward the
scope. Metadata values are strings."""
COUNTS = "true"
FORK_TIME = "fork_time"
"""Metadata key of a fork's copy: when the fork was made (the copy keeps the original's
``recorded_at``)."""

_MARK = f'"{FORKED_FROM}"'


def is_copy(metadata: Mapping[str, Any]) -> bool:
    """True for an event a fork copied (counting or not)."""
    return bool(metadata.get(FORKED_FROM))


def counts_in_scope(metadata: Mapping[str, Any]) -> bool:
    """False for an event a fork copied without being asked to count it."""
    return not is_copy(metadata) or metadata.get(FORK_COUNTS) == COUNTS


def raw_counts_in_scope(metadata_json: str | None) -> bool:
    """``counts_in_scope`` of an ``events.metadata`` text, parsed only when it may hold a
    fork's mark (a rebuild folds raw rows without their metadata parsed)."""
    if not metadata_json or _MARK not in metadata_json:
        return True
    return counts_in_scope(json.loads(metadata_json))
