"""Canonical JSON (the bytes every hash is taken over) and SHA-256 of text."""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any, NoReturn

import orjson

# The reference form (hashes depend on it byte for byte): built once, not per call.
_LEGACY = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                           allow_nan=False)
# Subclasses, datetimes and dataclasses are not JSON to the reference encoder: orjson
# hands them to ``refuse_non_json`` and the reference form decides (and raises) instead.
PLAIN_JSON_ONLY = (orjson.OPT_PASSTHROUGH_SUBCLASS | orjson.OPT_PASSTHROUGH_DATETIME
                   | orjson.OPT_PASSTHROUGH_DATACLASS)
"""orjson options under which only plain JSON values (exact ``str``/``int``/``dict``/...)
are written; anything else goes to ``default`` (``refuse_non_json``)."""
_OPTIONS = orjson.OPT_SORT_KEYS | PLAIN_JSON_ONLY
# Where orjson's output may differ from the reference: floats below 1e-4 (orjson writes
# 1e-7 or 0.00001, the reference 1e-07 and 1e-05) and ``null``, which is also how orjson
# writes NaN and infinity (the reference refuses them). Strings that merely contain
# these bytes take the reference path too: slower, never different.
_SMALL_EXPONENT = re.compile(rb"e-\d(?!\d)")


def _maybe_different(out: bytes) -> bool:
    # Two substring tests and a pattern with a literal prefix: ~5x faster on long text
    # than one alternation, which the regex engine scans position by position.
    return b"null" in out or b".0000" in out or _SMALL_EXPONENT.search(out) is not None


def refuse_non_json(value: Any) -> NoReturn:
    """orjson's ``default``: a value that is not plain JSON raises ``TypeError``."""
    raise TypeError(type(value).__name__)


def canonical_json(value: Any) -> str:
    """Serialize ``value`` deterministically: sorted keys, no spaces, UTF-8, no NaN.

    The form is ``json.dumps(value, sort_keys=True, separators=(",", ":"),
    ensure_ascii=False, allow_nan=False)``; orjson produces it, several times faster,
    whenever it provably writes the same bytes (tests/test_canonical.py checks it).
    """
    try:
        out = orjson.dumps(value, default=refuse_non_json, option=_OPTIONS)
    except TypeError:  # non-string keys, big ints, lone surrogates, other types
        return _LEGACY.encode(value)
    if not _flat_without_floats(value) and _maybe_different(out):
        return _LEGACY.encode(value)
    return out.decode()


_PLAIN_SCALARS = frozenset({str, int, bool})


def _flat_without_floats(value: Any) -> bool:
    # A flat object of strings, integers and booleans (most payloads), or one such value
    # alone (a setting's), has no float and no null, so orjson's bytes are the
    # reference's: no need to scan them (~1.8 us a message). Checked in C, as
    # ``store.read`` checks a flat payload.
    kind = type(value)
    if kind is dict:
        return _PLAIN_SCALARS.issuperset(map(type, value.values()))
    return kind in _PLAIN_SCALARS


def sha256_hex(text: str) -> str:
    """Hex SHA-256 of ``text`` encoded as UTF-8."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
