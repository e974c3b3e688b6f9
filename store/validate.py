"""Turn user input into validated, normalized events, or a one-line error."""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from ctxledger.store.canonical import canonical_json
from ctxledger.store.catalog import CATALOG
from ctxledger.store.errors import EventValidationError
from ctxledger.store.records import NewEvent, new_event
from ctxledger.store.streams import stream_kind
from ctxledger.store.strict import (
    DEFAULT_MAX_EVENT_BYTES,
    check_json_value,
    check_text,
    json_value_ok,
)
from ctxledger.store.upcasting import upcast

_INPUT_KEYS = frozenset({"type", "data", "id", "event_id", "metadata", "schema_version"})
_METADATA_KEYS = ("actor", "causation_id", "correlation_id", "forked_from", "forked_at",
                  "fork_time", "fork_counts")
"""Metadata keys with a meaning; each holds a string."""
METADATA_EXTRA = "extra"
"""The one namespace for the app's own metadata: any JSON object. Every other key is
refused, so a typo (``causation``) is an error instead of silently meaning nothing."""


def describe_validation_error(exc: ValidationError) -> str:
    """Compress a pydantic error into one line naming the field and the problem."""
    parts = []
    for err in exc.errors()[:3]:
        loc = ".".join(str(p) for p in err["loc"]) or "data"
        # A rule's own ValueError is already a sentence: pydantic's label adds nothing.
        parts.append(f"{loc}: {err['msg'].removeprefix('Value error, ')}")
    more = len(exc.errors()) - 3
    return "; ".join(parts) + (f" (+{more} more)" if more > 0 else "")


def coerce_new_event(raw: NewEvent | Mapping[str, Any]) -> NewEvent:
    """Accept a ``NewEvent`` or a mapping ``{"type", "data"[, "id", "metadata"]}``."""
    if isinstance(raw, NewEvent):
        return raw
    if not isinstance(raw, Mapping):
        raise EventValidationError(f"an event must be an object, got {type(raw).__name__}")
    unknown = () if _INPUT_KEYS.issuperset(raw) else sorted(set(raw) - _INPUT_KEYS)
    if unknown:
        raise EventValidationError(f"unknown event key(s): {', '.join(unknown)}")
    type_name = raw.get("type")
    if not isinstance(type_name, str) or not type_name:
        raise EventValidationError("event is missing its 'type'")
    data = raw.get("data", {})
    if not isinstance(data, Mapping):
        raise EventValidationError(f"{type_name}: 'data' must be an object")
    metadata = raw.get("metadata", {})
    if not isinstance(metadata, Mapping):
        raise EventValidationError(f"{type_name}: 'metadata' must be an object")
    if "id" in raw and "event_id" in raw:
        raise EventValidationError(
            f"{type_name}: the event id is given twice, as 'id' and as 'event_id'")
    event_id = raw.get("id", raw.get("event_id"))
    if event_id is not None and not isinstance(event_id, str):
        raise EventValidationError(f"{type_name}: 'id' must be a string")
    schema_version = raw.get("schema_version")
    if schema_version is not None and (
        not isinstance(schema_version, int) or isinstance(schema_version, bool)
    ):
        raise EventValidationError(f"{type_name}: 'schema_version' must be an integer")
    return new_event(type_name, dict(data), event_id, dict(metadata), schema_version)


def check_metadata(type_name: str, metadata: Mapping[str, Any]) -> None:
    """Known keys hold strings, ``extra`` an object; any other key is refused."""
    if not metadata:
        return
    if not json_value_ok(metadata):
        check_json_value(metadata, f"{type_name}: metadata")
    for key, value in metadata.items():
        if key == METADATA_EXTRA:
            if not isinstance(value, Mapping):
                raise EventValidationError(f"{type_name}: metadata.extra must be an object")
        elif key not in _METADATA_KEYS:
            raise EventValidationError(
                f"{type_name}: unknown metadata key {key!r}; known: "
                f"{', '.join(_METADATA_KEYS)}, and {METADATA_EXTRA} for the app's own")
        elif value is not None and not isinstance(value, str):
            raise EventValidationError(f"{type_name}: metadata.{key} must be a string")


class _UUID7:
    """Time-ordered ids (RFC 9562 version 7): 48 bits of Unix milliseconds, 12 bits of
    sub-millisecond time, 62 random bits. Generated ids rise within a process (a clock
    step back reuses the last time plus one), so the ``event_id`` index is written at its
    right edge instead of at a random page per insert."""

    def __init__(self) -> None:
        self._last = 0
        self._lock = threading.Lock()
        self._pool = b""  # random bytes drawn 4 KiB at a time: one syscall per 512 ids
        self._at = 0
        # A forked child must not replay its parent's bytes.
        os.register_at_fork(after_in_child=self._drop_pool)

    def _drop_pool(self) -> None:
        self._pool, self._at = b"", 0

    def __call__(self) -> str:
        ms, fraction = divmod(time.time_ns(), 1_000_000)
        # 48 bits of ms, then the fraction of the ms in 12 bits (4096ths).
        stamp = (ms << 12) | (fraction * 4096 // 1_000_000)
        with self._lock:
            if stamp <= self._last:
                stamp = self._last + 1
            self._last = stamp
            at = self._at
            if at + 8 > len(self._pool):
                self._pool, at = os.urandom(4096), 0
            self._at = at + 8
            pool = self._pool
        rand = int.from_bytes(pool[at:at + 8], "big") & 0x3FFF_FFFF_FFFF_FFFF
        h = (((stamp >> 12) << 80) | (0x7000 | (stamp & 0xFFF)) << 64
             | 0x8000_0000_0000_0000 | rand).to_bytes(16, "big").hex()
        return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


new_event_id = _UUID7()
"""A new time-ordered event id (UUIDv7 text)."""


def normalize_event_id(event_id: str | None) -> str:
    """Return a canonical UUID string, generating one (UUIDv7) when absent."""
    if event_id is None:
        return new_event_id()
    try:
        return str(uuid.UUID(event_id))
    except ValueError:
        raise EventValidationError(f"event id {event_id!r} is not a UUID") from None


def validate_event(stream_id: str, event: NewEvent,
                   max_bytes: int = DEFAULT_MAX_EVENT_BYTES) -> tuple[NewEvent, str, str]:
    """Validate one event for ``stream_id``.

    Returns the normalized event (current schema version, data dumped from its model,
    a definite UUID) with its canonical data and metadata JSON.
    """
    model = CATALOG.get(event.type) if type(event.type) is str else None
    if model is None:
        check_text(event.type, "event type")  # a known type's name is clean text
        raise EventValidationError(f"unknown event type {event.type!r}")
    # The shared contract first, on the raw input: pydantic would coerce or crash on it.
    if not json_value_ok(event.data):
        check_json_value(event.data, f"{event.type}: data")
    check_metadata(event.type, event.metadata)
    kind = stream_kind(stream_id)
    if kind not in model.stream_kinds and "any" not in model.stream_kinds:
        allowed = " or ".join(model.stream_kinds)
        raise EventValidationError(
            f"{event.type} belongs in a {allowed} stream, not {kind} stream {stream_id!r}"
        )
    target = model.schema_version  # = current_version(event.type), without the lookup
    version = event.schema_version if event.schema_version is not None else target
    if version < 1 or version > target:
        raise EventValidationError(
            f"{event.type}: schema_version {version} is not between 1 and {target}"
        )
    try:
        # Current payloads need no upcast (nor a copy: validation does not mutate).
        data = event.data if version == target else upcast(event.type, version,
                                                             dict(event.data))[1]
        # "3" is not 3, true is not 1; the context tells a model the version it was
        # given in (a rule new in a later version may spare older payloads).
        parsed = model.model_validate(data, strict=True, context={"given_version": version})
    except ValidationError as exc:
        raise EventValidationError(f"{event.type}: {describe_validation_error(exc)}") from None
    dumped = parsed.model_dump(mode="json")
    # Optional fields left unset are not stored; explicit nulls and real defaults are.
    clean = dumped if None not in dumped.values() else {
        k: v for k, v in dumped.items() if v is not None or k in parsed.model_fields_set}
    try:
        data_json = canonical_json(clean)
        metadata_json = canonical_json(event.metadata) if event.metadata else "{}"
    except (TypeError, ValueError) as exc:
        raise EventValidationError(f"{event.type}: data is not JSON: {exc}") from None
    # ASCII text is one byte per character: no encoding needed to know its size.
    size = (len(data_json) if data_json.isascii() else len(data_json.encode("utf-8"))) + (
        len(metadata_json) if metadata_json.isascii() else len(metadata_json.encode("utf-8")))
    if size > max_bytes:
        raise EventValidationError(
            f"{event.type}: event is {size} bytes, over the {max_bytes}-byte limit"
        )
    normalized = new_event(event.type, clean, normalize_event_id(event.event_id),
                           dict(event.metadata), target)
    return normalized, data_json, metadata_json
