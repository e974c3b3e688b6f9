"""The per-stream SHA-256 hash chain: how an event is linked, and how a log is checked.

Each event's ``hash`` covers every stored column but ``position`` and its ``prev_hash``,
the previous event's hash in its stream (``GENESIS_HASH`` for the first), so altering,
dropping or reordering an event breaks every later link of its stream. With a chain key
each link is an HMAC (``store.chain_key``). The global chain across streams, folded into
seals, is ``store.seal``; ``store.verify`` reads the log through ``ChainCheck``.
"""

from __future__ import annotations

from typing import Any

from ctxledger.store.chain_key import CHAIN_KEY_ENV, ChainKey, link_hash
from ctxledger.store.clock import format_utc

GENESIS_HASH = "0" * 64
"""``prev_hash`` of the first event in every stream."""

ERASED_TYPE = "event.erased"
"""The type of an erased event's row (``store.erase``): its links stay, its hash cannot
be recomputed, so ``ChainCheck`` hands it to the erasure check instead."""


def event_hash(
    *,
    prev_hash: str,
    stream_id: str,
    stream_version: int,
    event_id: str,
    type: str,
    schema_version: int,
    data_json: str,
    metadata_json: str,
    recorded_at: str,
    key: ChainKey | None = None,
) -> str:
    """Chain hash of one event; every stored column except ``position`` is covered.

    With ``key`` the link is an HMAC (see ``store.chain_key``).

    ``position`` is left out on purpose: PostgreSQL may leave holes, and the chain
    is per stream, so a stream's hashes must not depend on other streams' writes.
    """
    # Fields joined by a separator that canonical JSON never emits unescaped.
    payload = "\x1f".join(
        (prev_hash, stream_id, str(stream_version), event_id, type, str(schema_version),
         data_json, metadata_json, recorded_at)
    )
    return link_hash(payload, key)


def row_hash(row: Any, key: ChainKey | None) -> str:
    """The hash a stored ``events`` row should have (``recorded_at`` as stored)."""
    return event_hash(
        prev_hash=row.prev_hash, stream_id=row.stream_id, stream_version=row.stream_version,
        event_id=row.event_id, type=row.type, schema_version=row.schema_version,
        data_json=row.data, metadata_json=row.metadata,
        recorded_at=format_utc(row.recorded_at), key=key)


class ChainCheck:
    """Checks the chains of a log fed one ``events`` row at a time, in (stream_id,
    stream_version) order: versions without gaps, each ``prev_hash`` the previous hash,
    each hash recomputed.

    With ``key``, links are HMACs; plain links are accepted only before the first keyed
    event (a log that adopted the key later). ``check_hashes=False`` checks versions and
    links only (for a keyed log checked without its key).
    """

    def __init__(self, key: ChainKey | None, *, check_hashes: bool = True) -> None:
        self.key = key
        self.check_hashes = check_hashes
        self.events = 0
        self.streams = 0
        self.problems: list[str] = []
        self._current: str | None = None
        self._expected_prev = GENESIS_HASH
        self._expected_version = 0
        self._first_keyed: int | None = None
        self._plain: list[int] = []
        self.erased: list[tuple[int, str, str]] = []
        """(position, event id, hash) of every erased row met (``store.erase``)."""

    def check(self, r: Any) -> None:
        """Check one row (it needs every column of ``events``)."""
        key = self.key
        if r.stream_id != self._current:
            self._current, self._expected_prev, self._expected_version = (
                r.stream_id, GENESIS_HASH, 0)
            self.streams += 1
        self._expected_version += 1
        where = f"stream {r.stream_id!r} v{r.stream_version} (position {r.position})"
        if r.stream_version != self._expected_version:
            self.problems.append(f"{where}: version gap, expected v{self._expected_version}")
            self._expected_version = r.stream_version
        if r.prev_hash != self._expected_prev:
            self.problems.append(f"{where}: prev_hash does not match the previous event")
        if r.type == ERASED_TYPE:
            self.erased.append((int(r.position), str(r.event_id), str(r.hash)))
        elif self.check_hashes:
            if row_hash(r, key) == r.hash:
                if key is not None and (self._first_keyed is None
                                        or r.position < self._first_keyed):
                    self._first_keyed = r.position
            elif key is not None and row_hash(r, None) == r.hash:
                self._plain.append(r.position)
            else:
                self.problems.append(f"{where}: hash mismatch, content was altered")
        self._expected_prev = r.hash
        self.events += 1

    def finish(self) -> list[str]:
        """Every problem found, with the plain links after the first keyed one."""
        first_keyed = self._first_keyed
        late = sorted(p for p in self._plain if first_keyed is not None and p > first_keyed)
        if late:
            self.problems.append(
                f"{len(late)} event(s) after the first keyed one (position {first_keyed})"
                f" are not linked with the chain key, first at position {late[0]}: forged,"
                f" or appended without {CHAIN_KEY_ENV}")
        return self.problems
