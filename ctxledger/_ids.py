"""Derived event ids, in a module of its own: ``ctxledger hook`` derives a tool use's id
in a process that imports nothing but the standard library (see ``ctxledger._hook._spool``)."""

from __future__ import annotations

import hashlib

# The namespace's 16 bytes (7d1c2f0a-5b8e-4e1f-9c36-0a4b2d9e6f13).
_DERIVED_ID_NAMESPACE = bytes.fromhex("7d1c2f0a5b8e4e1f9c360a4b2d9e6f13")


def derived_event_id(*parts: str) -> str:
    """A stable event id for ``parts`` (a session and what in it the event records), so
    that writing the same thing again is an idempotent retry, not a second event: the
    name-based UUID (version 5, RFC 4122) of the parts, computed here rather than by the
    ``uuid`` module, whose import (``platform``, ``subprocess``) a tool use cannot pay."""
    digest = bytearray(hashlib.sha1(_DERIVED_ID_NAMESPACE + "\x1f".join(parts).encode(
        "utf-8")).digest()[:16])
    digest[6] = (digest[6] & 0x0F) | 0x50  # version 5
    digest[8] = (digest[8] & 0x3F) | 0x80  # the RFC 4122 variant
    text = digest.hex()
    return f"{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"
