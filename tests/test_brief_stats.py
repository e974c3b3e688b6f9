"""Brief statistics: the nearest-rank P95 of brief tokens over a scope stays within the
2500-token budget on a generated 200-turn campaign whose unconstrained briefs exceed it
(so the budget, not the data, keeps it there), on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from typer.testing import CliRunner

from ctxledger import Ledger, LedgerError
from ctxledger.cli import app
from ctxledger.jobs._brief_stats import brief_stats, nearest_rank

START = datetime(2026, 1, 1, tzinfo=UTC)
WORDS = ("ash", "banner", "cinder", "drum", "ember", "frost", "gate", "harbor", "iron",
         "jade", "keep", "lantern", "mist", "north", "oath", "pike", "quarry", "raven",
         "salt", "tower", "umber", "vigil", "watch", "yew", "zenith", "bridge", "crown")
SCOPE = "campaign"
TURNS = 200


def words(seed: int, count: int) -> str:
    """``count`` words picked deterministically from ``seed``."""
    return " ".join(WORDS[(seed * 7 + i * 11 + i * i) % len(WORDS)] for i in range(count))


def campaign_events() -> list[tuple[str, dict[str, Any]]]:
    scope = f"scope:{SCOPE}"
    out: list[tuple[str, dict[str, Any]]] = [
        (scope, {"type": "source.registered", "data": {
            "source_id": "lore", "version": "1", "trust": 0.8, "neutral": True}}),
        (scope, {"type": "source.registered", "data": {
            "source_id": "notes", "version": "1", "trust": 0.5, "neutral": True}})]
    for e in range(40):
        out.append((scope, {"type": "entity.put", "data": {
            "entity_id": f"e{e:02d}", "name": f"Warden {words(e, 2).title()} {e}",
            "facts": [{"text": f"{words(e * 5 + f, 14)}.", "critical": f < 2}
                      for f in range(4)],
            "tags": ["seen" if e % 8 < 5 else "unseen"]}}))
    for s in range(120):
        out.append((scope, {"type": "snippet.added", "data": {
            "snippet_id": f"s{s:03d}", "source_id": "lore" if s % 3 else "notes",
            "source_version": "1", "text": f"{words(s * 3, 55)}.",
            "entities": [f"e{(s * 7) % 40:02d}"]}}))
    for old in range(3):
        stream = f"earlier-{old}"
        out += [(stream, {"type": "session.started", "data": {"scope": SCOPE}}),
                (stream, {"type": "session.ended", "data": {"summary": words(old, 120)}})]
    return out


def play(ledger: Ledger) -> list[Any]:
    for stream, event in campaign_events():
        ledger.append(stream, event)
    session = "turns"
    ledger.append(session, [{"type": "session.started", "data": {"scope": SCOPE}},
                            {"type": "persona.set", "data": {
                                "agent_id": "hero", "knowledge_scope": ["seen"]}}])
    assemblies = []
    for turn in range(TURNS):
        ledger.append(session, {"type": "message.appended", "data": {
            "message_id": f"m{turn}", "role": "user", "content": words(turn, 25)}})
        if turn % 25 == 24:
            ledger.append(session, {"type": "history.summarized", "data": {
                "through_message_id": f"m{turn}", "summary": words(turn, 20 + turn)}})
        assembly = ledger.assemble(session, "brief", now=START + timedelta(minutes=turn))
        ledger.record_assembly(session, assembly)
        assemblies.append(assembly)
    return assemblies


def test_nearest_rank() -> None:
    assert nearest_rank([], 95) is None
    assert nearest_rank([5], 95) == 5
    values = list(range(1, 21))  # ceil(0.95 * 20) = 19th smallest
    assert nearest_rank(list(reversed(values)), 95) == 19
    assert nearest_rank(list(range(1, 101)), 95) == 95


def test_p95_of_a_generated_campaign_is_within_the_budget(ledger: Ledger, db_url: str
                                                          ) -> None:
    assemblies = play(ledger)
    bound = [a for a in assemblies
             if any(d.reason.startswith("over_budget") for d in a.decisions)]
    assert len(bound) > TURNS // 2  # unconstrained, most briefs would be over 2500
    stats = brief_stats(ledger, SCOPE)
    assert stats.assemblies == TURNS and stats.budget == 2500
    assert stats.p95_tokens == nearest_rank([a.tokens.total for a in assemblies], 95)
    assert stats.p95_tokens is not None and stats.p95_tokens <= 2500 and stats.within_budget
    result = CliRunner().invoke(app, ["--db", db_url, "brief-stats", "--scope", SCOPE])
    assert result.exit_code == 0, result.stderr
    assert f'"p95_tokens":{stats.p95_tokens}' in result.stdout.replace(" ", "")


def test_an_unknown_scope_is_an_error_as_in_usage(ledger: Ledger, db_url: str) -> None:
    ledger.append("s1", {"type": "session.started", "data": {"scope": "alice"}})
    with pytest.raises(LedgerError, match="unknown scope 'nosuch'"):
        brief_stats(ledger, "nosuch")
    assert brief_stats(ledger, "alice").assemblies == 0  # known, nothing assembled yet
    for command in ("brief-stats", "usage"):
        result = CliRunner().invoke(app, ["--db", db_url, command, "--scope", "nosuch"])
        assert result.exit_code == 1
        assert result.stderr.splitlines() == [
            "error: unknown scope 'nosuch': no session or scope stream names it"]
