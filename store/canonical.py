"""Canonical JSON and the per-stream SHA-256 hash chain."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from ctxledger.store.chain_key import ChainKey, link_hash

GENESIS_HASH = "0" * 64
"""``prev_hash`` of the first event in every stream."""


def canonical_json(value: Any) -> str:
    """Serialize ``value`` deterministically: sorted keys, no spaces, UTF-8, no NaN."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False)


def sha256_hex(text: str) -> str:
    """Hex SHA-256 of ``text`` encoded as UTF-8."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


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
