"""The JSON Schema of the events the log accepts (``ctxledger schema events``).

One schema per catalog type, built from its pydantic model, under a ``oneOf`` keyed by
the ``type`` constant: what an input line of ``ctxledger append`` may hold.
"""

from __future__ import annotations

from typing import Any

from pydantic.json_schema import models_json_schema

from ctxledger.store.catalog import CATALOG
from ctxledger.store.upcasting import current_version

DIALECT = "https://json-schema.org/draft/2020-12/schema"


def events_schema() -> dict[str, Any]:
    """``{"oneOf": [...]}`` over every event type, each with its ``data`` model."""
    names = sorted(CATALOG)
    refs, top = models_json_schema([(CATALOG[name], "validation") for name in names],
                                   ref_template="#/$defs/{model}")
    variants = []
    for name in names:
        model = CATALOG[name]
        variants.append({
            "type": "object",
            "title": name,
            "description": f"{name} (stream kinds: {', '.join(model.stream_kinds)})",
            "properties": {
                "type": {"const": name},
                "schema_version": {"type": "integer", "minimum": 1,
                                   "maximum": current_version(name)},
                "data": refs[(model, "validation")],
                "id": {"type": "string", "format": "uuid"},
                "metadata": {"type": "object", "properties": {
                    key: {"type": "string"}
                    for key in ("actor", "causation_id", "correlation_id")}},
            },
            "required": ["type"],
            "additionalProperties": False,
        })
    return {"$schema": DIALECT, "title": "ctxledger event",
            "description": "One event as appended: {type, data[, id, metadata]}.",
            "oneOf": variants, "$defs": top.get("$defs", {})}
