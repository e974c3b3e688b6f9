"""Profile ``brief`` on real SQLite and PostgreSQL: every rule on the example campaign
(``examples/brief.jsonl``), the modes, the budget's drop order, the incremental index,
and one digest on both backends."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest
from typer.testing import CliRunner

import ctxledger.assembler.profiles.brief.profile as brief_profile
from ctxledger import Ledger
from ctxledger.assembler.api import policy_for, request_for
from ctxledger.assembler.model import Assembly, Decision
from ctxledger.assembler.profiles.brief import BriefModeError, BriefPolicy
from ctxledger.assembler.profiles.brief.index_cache import IndexMemo, SnippetIndex
from ctxledger.cli import app
from ctxledger.io._examples import EXAMPLES_DIR, ScriptedClock, load_examples, read_examples
from ctxledger.projections.session_view import ViewRequest

NOW = datetime(2025, 4, 21, tzinfo=UTC)
TURN = "ashfall-turn-042"
FAN = "ashfall-fan-007"
KEPT = ("included", "rewritten", "truncated")


def load_campaign(url: str) -> Ledger:
    clock = ScriptedClock(NOW)
    ledger = Ledger.open(url, clock=clock)
    load_examples(ledger, clock, read_examples([EXAMPLES_DIR / "brief.jsonl"]))
    return ledger


@pytest.fixture
def campaign(db_url: str) -> Iterator[Ledger]:
    ledger = load_campaign(db_url)
    try:
        yield ledger
    finally:
        ledger.close()


def snippet_decisions(assembly: Assembly) -> list[Decision]:
    return [d for d in assembly.decisions if d.item.startswith("snippet:")]


def set_session(ledger: Ledger, key: str, value: Any) -> None:
    ledger.append(TURN, {"type": "setting.changed", "data": {"key": key, "value": value}})


def test_every_rule_fires_on_the_example_campaign(campaign: Ledger) -> None:
    assembly = campaign.assemble(TURN, "brief", now=NOW)
    policy = policy_for("brief", campaign.view(TURN).settings)
    assert isinstance(policy, BriefPolicy)
    view = campaign.view(TURN, replace(request_for("brief", policy, NOW), snippet_probe=None))
    text = assembly.text
    decisions = snippet_decisions(assembly)

    # Provenance: kept snippets carry [source@version]; unregistered ones are rejected.
    registered = {(s.source_id, s.version): s for s in view.sources}
    for decision in decisions:
        snippet = next(s for s in view.snippets if f"snippet:{s.snippet_id}" == decision.item)
        key = (snippet.source_id, snippet.source_version)
        tag = f"[{snippet.source_id}@{snippet.source_version}]"
        if key not in registered:
            assert (decision.action, decision.reason) == ("rejected", "source_not_registered")
        elif not registered[key].neutral:  # neutral mode
            assert (decision.action, decision.reason) == ("rejected", "source_not_neutral")
        if decision.action in KEPT:
            assert f"- {tag} " in text
    assert {d.reason for d in decisions if d.action == "rejected"} == {
        "source_not_registered", "source_not_neutral"}

    # MMR: more than 8 eligible, at most 8 kept, printed in MMR order.
    eligible = [d for d in decisions if d.action in KEPT or d.reason == "mmr_not_selected"]
    kept = [d for d in decisions if d.action in KEPT]
    assert len(eligible) > 8 and len(kept) == 8
    by_rank = sorted(kept, key=lambda d: d.detail["mmr_rank"])  # type: ignore[arg-type,return-value]
    assert [d.detail["mmr_rank"] for d in by_rank] == list(range(1, 9))
    tags = re.findall(r"^- \[([^\]]+)\] ", text.split("## Evidence")[1], re.MULTILINE)
    assert tags == [d.detail["provenance"] for d in by_rank]
    assert all(d.detail["mmr"] >= max(o.detail["mmr"] for o in eligible  # type: ignore[operator]
                                      if o.reason == "mmr_not_selected")
               for d in kept[:1])

    # Fog of war: masked entities, and snippets naming them, never printed.
    scope = set(view.persona.knowledge_scope) if view.persona else set()
    masked = [e for e in view.entities
              if e.entity_id not in scope and not scope & set(e.tags)]
    assert masked
    for entity in masked:
        assert entity.name not in text
        assert all(fact.text not in text for fact in entity.facts)
        assert any(d.item == f"entity:{entity.entity_id}" and d.action == "masked"
                   for d in assembly.decisions)
    masked_ids = {e.entity_id for e in masked}
    for decision in decisions:
        snippet = next(s for s in view.snippets if f"snippet:{s.snippet_id}" == decision.item)
        if masked_ids & set(snippet.entities) and (snippet.source_id, snippet.source_version) \
                in registered and registered[(snippet.source_id,
                                              snippet.source_version)].neutral:
            assert decision.action == "masked"

    # Sanitizing: an injection inside a registered neutral source is removed, with spans.
    rewritten = [d for d in decisions if d.reason == "sanitized"]
    assert any("disregard_the_above" in d.detail["patterns"]  # type: ignore[operator]
               for d in rewritten)
    for decision in rewritten:
        assert len(decision.detail["patterns"]) == len(decision.detail["starts"]) \
            == len(decision.detail["ends"])  # type: ignore[arg-type]
    for pattern in policy.injections:
        assert not re.search(pattern.regex, text), pattern.name
    assert policy.banned_terms
    for term in policy.banned_terms:
        assert term.casefold() not in text.casefold()
    assert policy.redaction in text
    assert any("banned_term" in d.detail["patterns"]  # type: ignore[operator]
               for d in rewritten)

    # Summaries: the earlier session's (fogged) and this session's, oldest first.
    events = text.split("## Past Events")[1]
    assert view.history is not None and view.history.summary is not None
    assert view.ended_sessions and view.ended_sessions[0].stream_id == "ashfall-turn-041"
    assert events.index("Turn 41") < events.index(view.history.summary.summary)
    assert assembly.tokens.total <= policy.max_tokens and not assembly.warnings


def test_fan_mode_uses_compliant_sources_and_fails_on_others(campaign: Ledger,
                                                             db_url: str) -> None:
    fan = campaign.assemble(FAN, "brief", now=NOW)
    kept = [d for d in snippet_decisions(fan) if d.action in KEPT]
    assert kept and fan.report.kb_mode == "fan"  # type: ignore[union-attr]
    set_session(campaign, "kb_mode", "fan")
    with pytest.raises(BriefModeError) as error:
        campaign.assemble(TURN, "brief", now=NOW)
    message = str(error.value)
    assert "\n" not in message and "canon-core@0.1.0" in message
    result = CliRunner().invoke(app, ["--db", db_url, "assemble", TURN, "--profile", "brief",
                                      "--now", "2025-04-21T00:00:00Z"])
    assert result.exit_code == 1
    assert result.stderr.splitlines() == [f"error: {message}"]


def test_budget_drops_lowest_mmr_then_shortens_summaries_then_facts(campaign: Ledger
                                                                    ) -> None:
    full = campaign.assemble(TURN, "brief", now=NOW)
    kept = sorted((d for d in snippet_decisions(full) if d.action in KEPT),
                  key=lambda d: d.detail["mmr_rank"])  # type: ignore[arg-type,return-value]

    set_session(campaign, "brief_max_tokens", full.tokens.total - 1)
    one_less = campaign.assemble(TURN, "brief", now=NOW)
    dropped = [d for d in snippet_decisions(one_less) if d.reason == "over_budget_lowest_mmr"]
    assert [d.item for d in dropped] == [kept[-1].item]
    assert one_less.tokens.total <= full.tokens.total - 1 and not one_less.warnings
    assert all(d.action != "truncated" for d in one_less.decisions)

    set_session(campaign, "brief_max_tokens", 150)
    tight = campaign.assemble(TURN, "brief", now=NOW)
    actions = {d.item: d for d in tight.decisions}
    assert all(actions[d.item].action == "dropped" for d in kept)
    summaries = [d for d in tight.decisions if d.item.startswith("summary:")]
    assert summaries and all(d.action == "truncated" for d in summaries)
    facts = [d for d in tight.decisions if d.item.startswith("fact:")]
    assert all(d.action in KEPT for d in facts if d.priority == 1)
    assert all(d.reason == "over_budget_non_critical_fact" for d in facts if d.priority == 0)
    assert tight.tokens.total > 150 and tight.warnings
    assert tight.report.over_budget  # type: ignore[union-attr]


def test_incremental_index_reuses_then_extends_and_never_changes_results(
        campaign: Ledger, monkeypatch: pytest.MonkeyPatch) -> None:
    memo = IndexMemo()
    monkeypatch.setattr(brief_profile, "MEMO", memo)
    campaign.assemble(TURN, "brief", now=NOW)
    assert memo.builds == 1
    campaign.append(TURN, {"type": "message.appended", "data": {
        "role": "user", "content": "The rider says the relief column waits at the ridge."}})
    policy = policy_for("brief", campaign.view(TURN).settings)
    view = campaign.view(TURN, request_for("brief", policy, NOW))
    assert isinstance(view.snippets_since, SnippetIndex) and view.snippets == ()
    warm = campaign.assemble(TURN, "brief", now=NOW)
    assert memo.builds == 1  # a new message never re-indexes
    assert fresh_digest(campaign, monkeypatch) == warm.digest
    monkeypatch.setattr(brief_profile, "MEMO", memo)

    campaign.append("scope:ashfall-campaign", {"type": "snippet.added", "data": {
        "snippet_id": "cc-ridge", "source_id": "canon-core", "source_version": "0.1.0",
        "text": "No relief column has ever waited at the ridge; riders who claim so lie.",
        "entities": ["hollow-gate"]}})
    view = campaign.view(TURN, request_for("brief", policy, NOW))
    assert [s.snippet_id for s in view.snippets] == ["cc-ridge"]
    extended = campaign.assemble(TURN, "brief", now=NOW)
    assert memo.builds == 2
    assert "snippet:cc-ridge" in {d.item for d in extended.decisions}

    assert fresh_digest(campaign, monkeypatch) == extended.digest


def fresh_digest(ledger: Ledger, monkeypatch: pytest.MonkeyPatch) -> str:
    """The digest with an empty memo: every snippet loaded and indexed from scratch."""
    monkeypatch.setattr(brief_profile, "MEMO", IndexMemo())
    return ledger.assemble(TURN, "brief", now=NOW).digest


@pytest.mark.postgres
def test_one_digest_on_both_backends(sqlite_url: str, pg_url: str) -> None:
    digests = []
    for url in (sqlite_url, pg_url):
        with load_campaign(url) as ledger:
            digests.append((ledger.assemble(TURN, "brief", now=NOW).digest,
                            ledger.assemble(FAN, "brief", now=NOW).digest))
    assert digests[0] == digests[1]


def test_fan_mode_checks_only_the_sources_the_brief_uses(campaign: Ledger) -> None:
    before = campaign.assemble(FAN, "brief", now=NOW)
    # A registered source without the fan compliance that no snippet cites: unused.
    campaign.append("scope:ashfall-fan", {"type": "source.registered", "data": {
        "source_id": "press-kit", "version": "1.0.0", "trust": 0.5, "neutral": True}})
    after = campaign.assemble(FAN, "brief", now=NOW)
    assert [d for d in snippet_decisions(after)] == [d for d in snippet_decisions(before)]
    # Once a snippet of it makes the brief, assembling fails and names it.
    campaign.append("scope:ashfall-fan", {"type": "snippet.added", "data": {
        "snippet_id": "press-1", "source_id": "press-kit", "source_version": "1.0.0",
        "text": " ".join(campaign.view(FAN, ViewRequest(history="full")).history.messages[-1]
                         .content.split()[:40]), "entities": []}})
    with pytest.raises(BriefModeError, match=r"source press-kit@1\.0\.0 lacks compliance"):
        campaign.assemble(FAN, "brief", now=NOW)
