"""Who pays for the separators between a novel tier's items, on SQLite and PostgreSQL.

By default (``separators: tier``) the separator before an item is charged to the item's
tier, so a hot budget equal to the exact sum of its items keeps one item fewer: the
tier's budget bounds what it really adds to the prompt. ``separators: framing`` is the
original document's rule: the budget bounds the items alone, and the separators are
framing, in no tier's figure."""

from __future__ import annotations

from typing import Any

from ctxledger import Assembly, Ledger
from ctxledger.assembler.api import policy_for
from ctxledger.assembler.profiles.novel import NovelPolicy
from ctxledger.store.canonical import canonical_json, sha256_hex

DIRECTIVES = 3


def put(item_id: str, kind: str, content: str, **extra: Any) -> dict[str, Any]:
    return {"type": "item.put", "data": {"item_id": item_id, "kind": kind,
                                         "content": content, **extra}}


def book(ledger: Ledger) -> None:
    ledger.append("b", [
        {"type": "session.started", "data": {"scope": "book"}},
        put("plan", "scene_plan", "Mara reaches the frozen harbor at dawn."),
        put("voice", "exemplar", "The ice groaned. She did not look back."),
        *(put(f"mood{n}", "emotional_directive", f"Keep the dread rising, beat {n}.")
          for n in range(DIRECTIVES))])


def assemble(ledger: Ledger, **policy: Any) -> Assembly:
    return ledger.assemble("b", "novel", policy={"profile": "novel", **policy})


def hot_items(assembly: Assembly) -> list[str]:
    return sorted(d.item for d in assembly.decisions
                  if d.section != "cold" and d.action == "included")


def test_a_hot_budget_equal_to_its_items_keeps_them_only_when_separators_are_framing(
        ledger: Ledger) -> None:
    book(ledger)
    roomy = assemble(ledger, separators="framing")
    exact = roomy.tokens.tiers["hot"]  # the hot items' own tokens, no separator
    items = {item.id: item.tokens for section in roomy.sections for item in section.items}
    assert exact == sum(items.values())
    assert len(items) == 2 + DIRECTIVES

    framing = assemble(ledger, separators="framing", hot_budget=exact)
    assert len(hot_items(framing)) == 2 + DIRECTIVES  # the document's rule: all fit
    assert framing.tokens.tiers["hot"] == exact
    assert framing.report.tiers[0].tier == "hot"  # type: ignore[attr-defined]
    hot_report = framing.report.tiers[0]  # type: ignore[attr-defined]
    assert (hot_report.tokens, hot_report.framing_tokens, hot_report.over_budget) == (
        exact, 0, False)
    # The separators are still in the prompt and in the total.
    assert framing.text.count("\n\n") >= 2 + DIRECTIVES - 1
    assert framing.tokens.total == roomy.tokens.total

    charged = assemble(ledger, hot_budget=exact)  # the default: charged to the tier
    kept = hot_items(charged)
    assert len(kept) == 2 + DIRECTIVES - 1
    assert {"plan", "voice"} <= set(kept)  # never dropped: a directive went
    assert charged.tokens.tiers["hot"] <= exact


def test_the_default_keeps_the_policy_versions_it_had() -> None:
    assert policy_for("novel", {}).version == f"novel@{NovelPolicy.REVISION}"
    custom = policy_for("novel", {"hot_budget": 900})
    data = custom.model_dump(mode="json")
    data.pop("model")
    data.pop("separators")
    # What the version hashed before the field existed.
    assert custom.version == (f"novel@{NovelPolicy.REVISION}+"
                              f"{sha256_hex(canonical_json(data))[:10]}")
    framing = policy_for("novel", {"policy.novel": {"hot_budget": 900,
                                                    "separators": "framing"}})
    assert framing.version != custom.version
