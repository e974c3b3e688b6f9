"""Knowledge for the ``brief`` profile: sources, snippets and entities per scope (from
``scope:<name>`` streams) and the persona of each session. The latest event wins by id;
a source's id is ``(source_id, version)`` because provenance names a version."""

from __future__ import annotations

from typing import ClassVar

import sqlalchemy as sa

from ctxledger.projections.base import Projection, metadata
from ctxledger.projections.rowstore import RowStore
from ctxledger.store.canonical import canonical_json
from ctxledger.store.records import RecordedEvent
from ctxledger.store.schema import PositionType
from ctxledger.store.streams import SCOPE_PREFIX, stream_kind

knowledge_sources = sa.Table(
    "knowledge_sources",
    metadata,
    sa.Column("scope", sa.Text, primary_key=True),
    sa.Column("source_id", sa.Text, primary_key=True),
    sa.Column("version", sa.Text, primary_key=True),
    sa.Column("trust", sa.Double, nullable=False),
    sa.Column("neutral", sa.Boolean),
    sa.Column("compliance", sa.Text),
    sa.Column("position", PositionType, nullable=False),
)
"""Registered sources; ``compliance`` is canonical JSON or NULL."""

knowledge_snippets = sa.Table(
    "knowledge_snippets",
    metadata,
    sa.Column("scope", sa.Text, primary_key=True),
    sa.Column("snippet_id", sa.Text, primary_key=True),
    sa.Column("source_id", sa.Text, nullable=False),
    sa.Column("source_version", sa.Text, nullable=False),
    sa.Column("text", sa.Text, nullable=False),
    sa.Column("entities", sa.Text, nullable=False),
    sa.Column("position", PositionType, nullable=False),
    # The scope's latest snippet and the snippets put after a position are index seeks.
    sa.Index("ix_knowledge_snippets_scope_position", "scope", "position"),
)
"""Retrievable snippets; ``entities`` is a canonical JSON list of entity ids."""

knowledge_entities = sa.Table(
    "knowledge_entities",
    metadata,
    sa.Column("scope", sa.Text, primary_key=True),
    sa.Column("entity_id", sa.Text, primary_key=True),
    sa.Column("name", sa.Text, nullable=False),
    sa.Column("facts", sa.Text, nullable=False),
    sa.Column("tags", sa.Text, nullable=False),
    sa.Column("position", PositionType, nullable=False),
)
"""World entities; ``facts`` (``[{text, critical}]``) and ``tags`` are canonical JSON."""

personas = sa.Table(
    "personas",
    metadata,
    sa.Column("stream_id", sa.String(200), primary_key=True),
    sa.Column("agent_id", sa.Text, nullable=False),
    sa.Column("knowledge_scope", sa.Text, nullable=False),
    sa.Column("beliefs", sa.Text),
    sa.Column("position", PositionType, nullable=False),
)
"""The persona of each session; ``knowledge_scope`` and ``beliefs`` are canonical JSON."""


def _json_or_none(value: object) -> str | None:
    return None if value is None else canonical_json(value)


class KnowledgeProjection(Projection):
    """Sources, snippets, entities (per scope) and personas (per session), written blind."""

    name: ClassVar[str] = "knowledge"
    version: ClassVar[int] = 1
    tables: ClassVar[tuple[sa.Table, ...]] = (
        knowledge_sources, knowledge_snippets, knowledge_entities, personas)
    handles: ClassVar[frozenset[str]] = frozenset(
        {"source.registered", "snippet.added", "entity.put", "persona.set"})

    def apply(self, event: RecordedEvent, rows: RowStore) -> None:
        """Replace the entry the event names."""
        data = event.data
        kind = stream_kind(event.stream_id)
        if event.type == "persona.set":
            if kind == "session":
                rows.put(personas, {
                    "stream_id": event.stream_id, "agent_id": data["agent_id"],
                    "knowledge_scope": canonical_json(data.get("knowledge_scope", [])),
                    "beliefs": _json_or_none(data.get("beliefs")), "position": event.position,
                })
            return
        if kind != "scope":
            return
        scope = event.stream_id[len(SCOPE_PREFIX):]
        if event.type == "source.registered":
            rows.put(knowledge_sources, {
                "scope": scope, "source_id": data["source_id"], "version": data["version"],
                "trust": float(data["trust"]), "neutral": data.get("neutral"),
                "compliance": _json_or_none(data.get("compliance")),
                "position": event.position,
            })
        elif event.type == "snippet.added":
            rows.put(knowledge_snippets, {
                "scope": scope, "snippet_id": data["snippet_id"], "source_id": data["source_id"],
                "source_version": data["source_version"], "text": data["text"],
                "entities": canonical_json(data.get("entities", [])),
                "position": event.position,
            })
        elif event.type == "entity.put":
            rows.put(knowledge_entities, {
                "scope": scope, "entity_id": data["entity_id"], "name": data["name"],
                "facts": canonical_json(data.get("facts", [])),
                "tags": canonical_json(data.get("tags", [])), "position": event.position,
            })
