"""Knowledge: sources, snippets and entities per scope (latest wins) and personas."""

from __future__ import annotations

from typing import Any

from ctxledger import Ledger
from ctxledger.projections.session_view import (
    Entity,
    EntityFact,
    Persona,
    Snippet,
    Source,
    ViewRequest,
)


def ev(type_: str, **data: Any) -> dict[str, Any]:
    return {"type": type_, "data": data}


def test_latest_wins_by_id_per_scope(ledger: Ledger) -> None:
    ledger.append("scope:w", [
        ev("source.registered", source_id="canon", version="1.0", trust=0.5),
        ev("source.registered", source_id="canon", version="2.0", trust=0.9, neutral=True,
           compliance={"non_commercial": True, "distribution": "local_only"}),
        ev("source.registered", source_id="canon", version="1.0", trust=0.7),
        ev("snippet.added", snippet_id="sn2", source_id="canon", source_version="2.0",
           text="The tower fell.", entities=["tower"]),
        ev("snippet.added", snippet_id="sn1", source_id="canon", source_version="1.0",
           text="old text"),
        ev("snippet.added", snippet_id="sn1", source_id="canon", source_version="2.0",
           text="new text", entities=["ava", "tower"]),
        ev("entity.put", entity_id="ava", name="Ava", tags=["pilot"],
           facts=[{"text": "flies", "critical": True}, {"text": "likes tea"}]),
        ev("entity.put", entity_id="ava", name="Ava Kade", facts=[{"text": "retired"}]),
    ])
    ledger.append("scope:other", ev("entity.put", entity_id="zed", name="Zed"))
    ledger.append("s", ev("session.started", scope="w"))
    view = ledger.view("s", ViewRequest(knowledge=True))
    assert view.sources == (
        Source("canon", "1.0", 0.7, None, None),
        Source("canon", "2.0", 0.9, True, {"distribution": "local_only",
                                          "non_commercial": True}))
    assert [(s.snippet_id, s.source_version, s.text, s.entities) for s in view.snippets] == [
        ("sn1", "2.0", "new text", ("ava", "tower")),
        ("sn2", "2.0", "The tower fell.", ("tower",))]
    assert all(isinstance(s, Snippet) for s in view.snippets)
    assert view.entities == (Entity("ava", "Ava Kade", (EntityFact("retired", False),), ()),)
    assert view.persona is None
    assert ledger.view("s").sources == ()


def test_persona_per_session_latest_wins(ledger: Ledger) -> None:
    ledger.append("s", [ev("persona.set", agent_id="ava", knowledge_scope=["pilot"]),
                        ev("persona.set", agent_id="ava", knowledge_scope=["pilot", "tower"],
                           beliefs=["the war is over"])])
    ledger.append("t", ev("persona.set", agent_id="bo"))
    request = ViewRequest(knowledge=True)
    assert ledger.view("s", request).persona == Persona("ava", ("pilot", "tower"),
                                                        ["the war is over"])
    assert ledger.view("t", request).persona == Persona("bo", (), None)
