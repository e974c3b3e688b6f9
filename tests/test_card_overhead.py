"""The card breakdown adds up, on SQLite and PostgreSQL: Active + Lorebook + Chat history
+ Framing/overhead = Total, in the report and the command line's table (the browser
view's sum is checked in ``test_ui.py``)."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from ctxledger import Ledger
from ctxledger.assembler.profiles.card import CardReport
from ctxledger.assembler.profiles.card.breakdown import card_table


def ev(type_: str, **data: object) -> dict[str, object]:
    return {"type": type_, "data": data}


@pytest.mark.parametrize("lore", [False, True])
def test_the_rows_add_up_to_the_total(ledger: Ledger, lore: bool) -> None:
    book = {"entries": [{"keys": ["harbor"], "content": "The harbor freezes in winter.",
                         "enabled": True, "insertion_order": 1}]}
    card: dict[str, object] = {"name": "Mara", "description": "A ship's captain.",
                               "personality": "Gruff.", "scenario": "A storm."}
    if lore:
        card["character_book"] = book
    ledger.append("s", [ev("session.started", scope="p"), ev("card.set", **card),
                        *(ev("message.appended", role="user" if n % 2 == 0 else "assistant",
                             content=f"line {n} about the harbor") for n in range(6))])
    assembly = ledger.assemble("s", "card")
    report = assembly.report
    assert isinstance(report, CardReport)
    assert (report.lorebook_tokens > 0) == lore
    parts = (report.total_tokens, report.lorebook_tokens, report.chat_history.tokens,
             report.overhead_tokens)
    assert sum(parts) == report.used_tokens == assembly.tokens.total
    # The same figure the engine's own sections give: the framing outside every section
    # (the system message's wrapper, the reply priming) plus each section's own labels.
    assert report.overhead_tokens == assembly.tokens.framing + sum(
        section.framing_tokens for section in assembly.sections) > 0
    out = io.StringIO()
    Console(file=out, width=160, color_system=None).print(card_table(report))
    rows = {line.split("│")[2].strip(): line.split("│")[3].strip()
            for line in out.getvalue().splitlines() if line.count("│") >= 4}
    shown = [int(rows["Active"]), int(rows.get("Lorebook", "0")), int(rows["Chat history"]),
             int(rows["Framing/overhead"])]
    assert shown == list(parts)
    assert sum(shown) == int(rows["Total"])
