"""Erasure: the content of chosen streams made unrecoverable, the chains still verifying.

An erased event keeps its row, its position, its stream version, its id, its time and
both links (``prev_hash`` and ``hash``), so every later link, every seal, anchor and
witnessed head still verifies. Its ``type`` becomes ``event.erased``, its ``data`` a
tombstone naming the type it had and the erasure that took it, its ``metadata`` ``{}``.
Its hash can no longer be recomputed, so ``verify`` accepts an erased row only when an
``erasure.completed`` event (in the ``system`` stream, itself chained and sealed like any
event) lists its position and commits to its (position, event id, hash): an event
blanked behind the log's back, or an attestation naming rows it did not erase, is a
problem. docs/erasure.md says why this design and what it does not hide.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import sqlalchemy as sa

from ctxledger.store.canonical import canonical_json
from ctxledger.store.hash_chain import ERASED_TYPE
from ctxledger.store.schema import events
from ctxledger.store.streams import SYSTEM_STREAM

ERASURE_TYPE = "erasure.completed"
"""The event that records an erasure (written only by ``Ledger.erase``)."""
RESERVED_TYPES = frozenset({ERASED_TYPE, ERASURE_TYPE})

_PAGE = 500
"""Positions per ``IN (...)``: under SQLite's and psycopg's bound-parameter limits."""


@dataclass(frozen=True, slots=True)
class ErasedRow:
    """What stays of one erased event, and what its erasure commits to."""

    position: int
    event_id: str
    hash: str
    type: str


def attestation_digest(rows: Iterable[tuple[int, str, str]]) -> str:
    """SHA-256 over the (position, event id, hash) of the erased rows, in position order:
    what an ``erasure.completed`` event commits to."""
    sha = hashlib.sha256()
    for position, event_id, digest in sorted(rows):
        sha.update(f"{position}\x1f{event_id}\x1f{digest}\n".encode())
    return sha.hexdigest()


def live_rows(conn: sa.Connection, streams: Sequence[str]) -> list[ErasedRow]:
    """The not-yet-erased events of ``streams``, in position order."""
    out: list[ErasedRow] = []
    for start in range(0, len(streams), 500):
        chunk = list(streams[start:start + 500])
        rows = conn.execute(
            sa.select(events.c.position, events.c.event_id, events.c.hash, events.c.type)
            .where(events.c.stream_id.in_(chunk), events.c.type != ERASED_TYPE)).all()
        out.extend(ErasedRow(int(r.position), r.event_id, r.hash, r.type) for r in rows)
    out.sort(key=lambda row: row.position)
    return out


def blank_rows(conn: sa.Connection, rows: Sequence[ErasedRow], erasure_id: str,
               progress: Callable[[int], None] | None = None) -> None:
    """Replace the content of ``rows`` by tombstones, in the caller's transaction, which
    is inside ``Backend.erasing`` (the update guard lets tombstones through). A
    tombstone depends only on the type it replaces: one statement per type and page of
    positions, not one per row."""
    by_type: dict[str, list[int]] = {}
    for row in rows:
        by_type.setdefault(row.type, []).append(row.position)
    done = 0
    for kind, positions in sorted(by_type.items()):
        tombstone = canonical_json({"erased_type": kind, "erasure": erasure_id})
        for start in range(0, len(positions), _PAGE):
            page = positions[start:start + _PAGE]
            conn.execute(events.update().where(events.c.position.in_(page))
                         .values(type=ERASED_TYPE, data=tombstone, metadata="{}"))
            done += len(page)
            if progress is not None:
                progress(done)


@dataclass(frozen=True, slots=True)
class Erasure:
    """One ``erasure.completed`` record, as replays need it."""

    position: int
    streams: tuple[str, ...]
    scopes: tuple[str, ...]
    """The scopes the erased sessions had joined (their events counted there)."""
    first: int
    """The first erased position."""
    reason: str


def erasures(conn: sa.Connection) -> list[Erasure]:
    """Every erasure recorded, oldest first."""
    out: list[Erasure] = []
    for row in conn.execute(
            sa.select(events.c.position, events.c.data)
            .where(events.c.stream_id == SYSTEM_STREAM, events.c.type == ERASURE_TYPE)
            .order_by(events.c.position)):
        data = json.loads(row.data)
        positions = data.get("positions") or [0]
        out.append(Erasure(int(row.position), tuple(data.get("streams", ())),
                           tuple(data.get("scopes", ())), int(min(positions)),
                           str(data.get("reason", ""))))
    return out


def check_erasures(conn: sa.Connection, erased: Sequence[tuple[int, str, str]]) -> list[str]:
    """Problems with the erased rows ``verify`` met: each must be listed by exactly one
    ``erasure.completed`` event, and each such event's digest must match its rows."""
    records = conn.execute(
        sa.select(events.c.position, events.c.data)
        .where(events.c.stream_id == SYSTEM_STREAM, events.c.type == ERASURE_TYPE)
        .order_by(events.c.position)).all()
    if not erased and not records:
        return []
    by_position = {position: (position, event_id, digest)
                   for position, event_id, digest in erased}
    problems: list[str] = []
    claimed: dict[int, int] = {}
    for record in records:
        data = json.loads(record.data)
        listed = [int(p) for p in data.get("positions", [])]
        missing = [p for p in listed if p not in by_position]
        if missing:
            problems.append(f"erasure at position {record.position} lists position"
                            f" {missing[0]}, which is not an erased event")
            continue
        for p in listed:
            if p in claimed:
                problems.append(f"position {p} is listed by two erasures"
                                f" ({claimed[p]} and {record.position})")
            claimed[p] = int(record.position)
        if attestation_digest(by_position[p] for p in listed) != data.get("digest"):
            problems.append(f"erasure at position {record.position} does not match the rows"
                            " it erased: their ids or hashes were changed")
    unclaimed = sorted(set(by_position) - set(claimed))
    if unclaimed:
        problems.append(f"{len(unclaimed)} event(s) were blanked with no erasure recorded,"
                        f" first at position {unclaimed[0]}: content was removed outside"
                        " erase")
    return problems
