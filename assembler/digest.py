"""The digest of an assembly: SHA-256 over its canonical JSON.

Canonical JSON (sorted keys, no spaces, UTF-8) of the assembly without the digest itself
and without ``tokens.methods`` (where the vocabulary was loaded from does not change a
count). Floats were rounded before they entered the model, and datetimes serialize in one
fixed UTC form, so the same input gives the same digest in any process.
"""

from __future__ import annotations

from typing import Any

from ctxledger.assembler.model import Assembly
from ctxledger.store.canonical import canonical_json, sha256_hex

_EXCLUDED: Any = {"digest": True, "tokens": {"methods": True}}


def canonical_payload(assembly: Assembly) -> str:
    """The canonical JSON text the digest is computed over."""
    return canonical_json(assembly.model_dump(mode="json", exclude=_EXCLUDED))


def compute_digest(assembly: Assembly) -> str:
    """Hex SHA-256 of ``canonical_payload``."""
    return sha256_hex(canonical_payload(assembly))


def seal(assembly: Assembly) -> Assembly:
    """``assembly`` with its ``digest`` set."""
    return assembly.model_copy(update={"digest": compute_digest(assembly)})
