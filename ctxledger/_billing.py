"""What a provider billed (``usage.reported``): the event an app appends after a call.

``Ledger.report_usage`` resolves the assembly the app sent (an ``Assembly``, its digest or
its position) to the session's newest ``context.assembled`` record of it, so the event
names both the digest and that record's log position: the audit sets the billed tokens
beside the predicted ones by that position, the rollup sums them per scope, model and day.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from ctxledger.store.errors import InvalidArgument
from ctxledger.store.schema import events

USAGE_TYPE = "usage.reported"
RECORD_TYPE = "context.assembled"

AssemblyRef = Any
"""An ``Assembly``, its digest (64 hex characters) or its position (an int)."""


class UnknownAssembly(InvalidArgument):
    """The session recorded no assembly with the digest or position given."""


@dataclass(frozen=True, slots=True)
class RecordRef:
    """A ``context.assembled`` record: its log position and the digest it holds."""

    record_position: int
    digest: str


def _ref_of(assembly: AssemblyRef) -> tuple[str | None, int | None]:
    """(digest, position) named by ``assembly``; one of them is None."""
    if isinstance(assembly, bool):
        raise InvalidArgument("assembly must be an Assembly, a digest or a position")
    if isinstance(assembly, int):
        return None, assembly
    if isinstance(assembly, str):
        if len(assembly) != 64 or any(c not in "0123456789abcdef" for c in assembly):
            raise InvalidArgument(f"assembly digest {assembly[:80]!r} is not 64 lowercase "
                                  "hex characters")
        return assembly, None
    digest = getattr(assembly, "digest", None)
    if isinstance(digest, str):
        return digest, None
    raise InvalidArgument("assembly must be an Assembly, a digest or a position")


def reference(assembly: AssemblyRef) -> str | int:
    """The digest or position ``assembly`` names (``InvalidArgument`` for anything else)."""
    digest, position = _ref_of(assembly)
    return digest if digest is not None else position  # type: ignore[return-value]


def find_record(conn: sa.Connection, session: str, assembly: AssemblyRef) -> RecordRef:
    """The newest ``context.assembled`` of ``session`` recording ``assembly``; raises
    ``UnknownAssembly`` (one line) when the session recorded no such assembly."""
    digest, position = _ref_of(assembly)
    # Newest first along the stream's own index (stream_id, stream_version).
    query = (sa.select(events.c.position, events.c.data)
             .where(events.c.stream_id == session, events.c.type == RECORD_TYPE)
             .order_by(events.c.stream_version.desc()))
    for row in conn.execute(query):
        data = json.loads(row.data)
        if (digest is not None and data.get("digest") == digest) or (
                position is not None and data.get("position") == position):
            return RecordRef(int(row.position), str(data["digest"]))
    named = f"digest {digest[:16]}..." if digest is not None else f"position {position}"
    raise UnknownAssembly(f"session {session!r} has no recorded assembly with {named} "
                          "(record what is sent with record_assembly, 'assemble --record' or"
                          " record=true)")


def usage_data(*, model: str, input_tokens: int, output_tokens: int, cached_tokens: int = 0,
               cost: float | None = None, record: RecordRef | None = None) -> dict[str, Any]:
    """The ``usage.reported`` payload (validated by the catalog when appended)."""
    data: dict[str, Any] = {"model": model, "input_tokens": input_tokens,
                            "output_tokens": output_tokens, "cached_tokens": cached_tokens}
    if cost is not None:
        data["cost"] = cost
    if record is not None:
        data["digest"] = record.digest
        data["record_position"] = record.record_position
    return data
