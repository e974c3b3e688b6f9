"""The optional chain key: with it every link (stream hashes and seals) is an HMAC.

Someone who can write the tables but lacks the key can then not forge a valid link, even
by recomputing hashes. The key is read from ``CTXLEDGER_CHAIN_KEY`` when a log is opened
(appends), sealed or verified, and is never written to the database: only its *key id*,
an HMAC of a fixed text, is stored with each seal, so ``verify`` can say "wrong key"
instead of "tampered". The key id reveals no more than any keyed link already does.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from dataclasses import dataclass

CHAIN_KEY_ENV = "CTXLEDGER_CHAIN_KEY"
_KEY_ID_TEXT = b"ctxledger chain key id v1"


@dataclass(frozen=True, slots=True)
class ChainKey:
    """A secret for keyed links, and its public id."""

    secret: bytes

    def __repr__(self) -> str:  # never print the secret
        return f"ChainKey(key_id={self.key_id!r})"

    @property
    def key_id(self) -> str:
        """16 hex digits identifying the key (stored with seals; not the key)."""
        return hmac.digest(self.secret, _KEY_ID_TEXT, "sha256").hex()[:16]

    def link(self, payload: str) -> str:
        """Hex HMAC-SHA256 of ``payload``."""
        return hmac.digest(self.secret, payload.encode("utf-8"), "sha256").hex()


def chain_key_from_env() -> ChainKey | None:
    """The key in ``CTXLEDGER_CHAIN_KEY`` (None when unset or empty)."""
    value = os.environ.get(CHAIN_KEY_ENV)
    return ChainKey(value.encode("utf-8", "surrogateescape")) if value else None


def link_hash(payload: str, key: ChainKey | None) -> str:
    """SHA-256 of ``payload``, or its HMAC under ``key``."""
    if key is None:
        return hashlib.sha256(payload.encode("utf-8")).hexdigest()
    return key.link(payload)
