"""Upcasters turn stored payloads of old schema versions into the current one on read."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Payload = dict[str, Any]
Upcaster = Callable[[Payload], Payload]

# (type, from_version) -> function producing version from_version + 1.
UPCASTERS: dict[tuple[str, int], Upcaster] = {}


def upcaster(type_name: str, from_version: int) -> Callable[[Upcaster], Upcaster]:
    """Register a function that lifts ``type_name`` data from ``from_version`` by one."""

    def register(fn: Upcaster) -> Upcaster:
        UPCASTERS[(type_name, from_version)] = fn
        return fn

    return register


@upcaster("tool.used", 1)
def _tool_used_v1_to_v2(data: Payload) -> Payload:
    # v1 (before 0.1.0 final) used "tool" and "success".
    out = {k: v for k, v in data.items() if k not in ("tool", "success")}
    out["tool_name"] = data.get("tool", data.get("tool_name"))
    if "success" in data:
        out["ok"] = data["success"]
    return out


@upcaster("message.appended", 1)
def _message_appended_v1_to_v2(data: Payload) -> Payload:
    # v2 added roles and fields; a v1 payload is a v2 payload as it is (a v1 tool result
    # without a call id is spared the v2 rule that new ones name it).
    return data


@upcaster("context.assembled", 1)
def _context_assembled_v1_to_v2(data: Payload) -> Payload:
    # v1 records did not store the assembly format they hashed: every release that wrote
    # them made format 3 or earlier, so an audit reads them as format 3 (an older format,
    # never a digest to compare with the current one).
    return {**data, "format_version": data.get("format_version", 3)}


_current: dict[str, int] = {}


def current_version(type_name: str) -> int:
    """The schema version new events of this type are written with (1 for unknown types)."""
    if not _current:
        # Read on first use: a reader that decodes no event (``state``) never builds the
        # catalog's pydantic models.
        from ctxledger.store.catalog import CATALOG

        _current.update((name, model.schema_version) for name, model in CATALOG.items())
    return _current.get(type_name, 1)


def upcast(type_name: str, schema_version: int, data: Payload) -> tuple[int, Payload]:
    """Lift ``data`` to the current schema version; returns (version, data)."""
    target = current_version(type_name)
    version = schema_version
    while version < target:
        step = UPCASTERS.get((type_name, version))
        if step is None:
            raise LookupError(f"no upcaster for {type_name} v{version}")
        data = step(data)
        version += 1
    return version, data
