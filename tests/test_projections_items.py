"""Context items (put / remove, put order) and documents (latest per doc_id)."""

from __future__ import annotations

from typing import Any

from ctxledger import Ledger
from ctxledger.projections.session_view import ViewRequest


def put(item_id: str, kind: str, content: str, **flags: Any) -> dict[str, Any]:
    return {"type": "item.put", "data": {"item_id": item_id, "kind": kind, "content": content,
                                         **flags}}


def test_items_put_replace_and_remove_keep_put_order(ledger: Ledger) -> None:
    ledger.append("n", [put("plan", "scene_plan", "Scene 1", evolving=True),
                        put("ava", "character", "Ava", in_scene=True, pov=True),
                        put("s1", "summary", "Ch1", chapter=1),
                        put("world", "world", "Map")])
    ledger.append("n", [put("plan", "scene_plan", "Scene 2"),  # re-put: moves to the end
                        {"type": "item.removed", "data": {"item_id": "s1"}},
                        {"type": "item.removed", "data": {"item_id": "missing"}}])
    ledger.append("other", put("x", "plot", "elsewhere"))
    items = ledger.view("n", ViewRequest(items=True)).items
    assert [i.item_id for i in items] == ["ava", "world", "plan"]
    assert [i.position for i in items] == sorted(i.position for i in items)
    ava, _, plan = items
    assert (ava.kind, ava.content, ava.in_scene, ava.pov, ava.active, ava.chapter) == (
        "character", "Ava", True, True, None, None)
    # A put replaces the whole item: flags from the first put do not survive.
    assert (plan.content, plan.evolving) == ("Scene 2", None)
    assert ledger.view("n").items == ()


def test_documents_latest_per_doc_id(ledger: Ledger) -> None:
    graph = {"modules": {"a": ["b"], "b": []}}
    ledger.append("s", [
        {"type": "document.put", "data": {"doc_id": "state", "kind": "plan_state",
                                          "content": "# Phase 1"}},
        {"type": "document.put", "data": {"doc_id": "deps", "kind": "dep_graph",
                                          "content": graph}},
        {"type": "document.put", "data": {"doc_id": "state", "kind": "plan_state",
                                          "content": "# Phase 2"}},
    ])
    docs = ledger.view("s", ViewRequest(documents=True)).documents
    assert [(d.doc_id, d.kind, d.content) for d in docs] == [
        ("deps", "dep_graph", graph), ("state", "plan_state", "# Phase 2")]
