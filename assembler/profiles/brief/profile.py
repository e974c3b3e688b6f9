"""Profile ``brief`` (Novel Engine): the TurnBrief for one persona agent.

Rules (SPEC §3 "Profile brief"):

1. Retrieval: BM25 (``bm25s``) over the scope's snippets; the query is the last
   ``recent_messages`` messages plus the names of the entities the persona can see. The
   top ``retrieve_k`` by retrieval score are the candidates (a dense scorer can join
   through reciprocal-rank fusion, ``bm25.fuse``).
2. Provenance and mode: a snippet whose (source, version) is not registered is
   ``rejected``; in ``neutral`` mode so is one whose source is not neutral. In ``fan``
   mode every source the brief uses (the sources of its snippets) must carry the fan
   compliance, or assembling fails naming the source.
3. Fog of war: entities outside the persona's ``knowledge_scope`` are ``masked``, and so
   is every snippet that names one; other printed text has masked names replaced.
4. MMR (λ = 0.7) picks at most 8 of the rest; relevance = retrieval × trust normalized
   to [0, 1]; order: MMR, trust, relevance, snippet_id.
5. Sanitizing: instruction-like phrases are removed and banned terms redacted in the
   printed snippets and facts (one ``rewrite`` decision each, patterns and spans).
6. Budget: the brief, sent as one message, is at most ``max_tokens`` (``tokens.total``,
   the message's wrapper and the reply priming included). Over it, drop the lowest-MMR
   snippets, then shorten past-event summaries oldest first, then drop
   non-critical facts least relevant first; still over: overshoot with a warning.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, ClassVar

from ctxledger.assembler.budget import ShedStep
from ctxledger.assembler.candidates import (
    Candidate,
    Composed,
    Frame,
    Piece,
    SectionLayout,
    joined,
)
from ctxledger.assembler.chat_tokens import wrapper_tokens
from ctxledger.assembler.decision_engine import Engine
from ctxledger.assembler.errors import AssemblyError
from ctxledger.assembler.inputs import Inputs
from ctxledger.assembler.model import Assembly
from ctxledger.assembler.policy import Policy
from ctxledger.assembler.profiles.base import Profile, report_of
from ctxledger.assembler.profiles.brief.analyzer import Analyzer, analyzer_for
from ctxledger.assembler.profiles.brief.bm25 import Scorer, Scores, fuse, rank_order
from ctxledger.assembler.profiles.brief.fog import Fog
from ctxledger.assembler.profiles.brief.index_cache import MEMO, SnippetIndex
from ctxledger.assembler.profiles.brief.mmr import cosine, relevance_items, select
from ctxledger.assembler.profiles.brief.policy import BriefPolicy
from ctxledger.assembler.profiles.brief.report import BriefReport, SnippetRow
from ctxledger.assembler.profiles.brief.sanitize import Sanitizer, change_detail
from ctxledger.assembler.ranking import ranked, round_score
from ctxledger.assembler.report import ProfileReport
from ctxledger.assembler.text import shorten_to
from ctxledger.assembler.tokens import TokenCounter
from ctxledger.projections.session_view import (
    Message,
    SessionView,
    Snippet,
    SnippetBase,
    Source,
    ViewRequest,
)

if TYPE_CHECKING:
    from rich.console import RenderableType

SECTION_PERSONA = "persona"
SECTION_WORLD = "world_state"
SECTION_EVIDENCE = "evidence"
SECTION_EVENTS = "past_events"
BULLET = "- "
FACT_BULLET = "  - "


class BriefModeError(AssemblyError):
    """``kb_mode`` fan with a source that lacks the fan compliance."""


def provenance(snippet: Snippet) -> str:
    """``source_id@version``."""
    return f"{snippet.source_id}@{snippet.source_version}"


@dataclass(frozen=True, slots=True)
class _EntityBlock:
    line: Candidate
    facts: list[Candidate]


@dataclass(frozen=True, slots=True)
class _Layout:
    title: str
    beliefs: list[Candidate]
    entities: list[_EntityBlock]
    snippets: list[Candidate]
    """In MMR order."""
    summaries: list[Candidate]
    """Oldest first."""


class BriefProfile(Profile):
    """The ``brief`` profile."""

    name: ClassVar[str] = "brief"
    policy_type: ClassVar[type[Policy]] = BriefPolicy
    report_type: ClassVar[type[ProfileReport]] = BriefReport
    # Messages form its query; knowledge is the scope's; earlier summaries are peers'.
    inputs: ClassVar[Inputs] = Inputs(
        session=frozenset({"message.appended", "message.retracted", "history.summarized",
                           "persona.set"}),
        scope=frozenset({"snippet.added", "entity.put", "source.registered"}),
        peers=frozenset({"session.ended"}))

    def request(self, policy: Policy, now: datetime, counter: TokenCounter) -> ViewRequest:
        """Knowledge (snippets incrementally, through the index memo), the last N messages
        (a window of N counted as 1 each), and the scope's earlier summaries."""
        assert isinstance(policy, BriefPolicy)
        key = policy.analyzer_key

        def probe(scope: str) -> list[SnippetBase]:
            return list(MEMO.offers(scope, key))

        def one_each(messages: Sequence[Message]) -> list[int]:
            return [1] * len(messages)

        return ViewRequest(history="full", now=now, history_budget=policy.recent_messages,
                           history_measure=one_each, knowledge=True, snippet_probe=probe,
                           ended_sessions=policy.summary_limit)

    def assemble(self, engine: Engine, view: SessionView, now: datetime,
                 policy: Policy) -> Assembly:
        """Retrieve, filter, select and fit the brief (see the module docstring)."""
        assert isinstance(policy, BriefPolicy)
        analyzer = analyzer_for(policy.word_pattern, policy.stopwords,
                                policy.stemmer_language)
        sources = {(s.source_id, s.version): s for s in view.sources}
        fog = Fog(view.entities, view.persona)
        sanitizer = Sanitizer(policy)
        counter = engine.counter

        query = _query(view, fog, policy, analyzer)
        index = MEMO.index_for(view, policy.analyzer_key, analyzer, k1=policy.k1, b=policy.b)
        scorers: list[Scorer] = [index.bm25] if index is not None and index.bm25 else []
        scores = fuse([scorer.scores(query) for scorer in scorers], k=policy.rrf_k) \
            if scorers else None

        title = policy.title + (f": {view.persona.agent_id}" if view.persona else "")
        beliefs = _beliefs(engine, view, fog)
        entities, facts_all = _entities(engine, fog, sanitizer, policy)
        retrieved = _snippets(engine, index, scores, sources, fog, sanitizer, policy)
        snippets = retrieved.kept
        summaries = _summaries(engine, view, fog)
        counter.prefetch([policy.context_role, title, policy.persona_heading, policy.world_heading,
                          policy.evidence_heading, policy.events_heading, BULLET,
                          FACT_BULLET, "\n", "\n\n"])

        layout = _Layout(title, beliefs, entities, snippets, summaries)

        # The brief goes out as one message: its wrapper and the reply priming count.
        sending = wrapper_tokens(counter, policy.context_role, policy.message_overhead) \
            + policy.message_overhead.reply_priming

        def measure(kept: Sequence[Candidate]) -> int:
            pieces = prompt_pieces(layout, {c.id: c for c in kept}, policy)
            return sending + sum(counter.count(piece.text) for piece in pieces if piece.text)

        kept = [*beliefs, *(b.line for b in entities), *(f for b in entities for f in b.facts),
                *snippets, *summaries]
        query_vector = Counter(query)
        shed = engine.shed_until_fits(
            kept, _steps(layout, facts_all, query_vector, analyzer, counter, policy),
            limit=policy.max_tokens, unit="tokens", measure=measure, reason="over_budget")
        final = {c.id: c for c in shed.kept}
        if policy.kb_mode == "fan":
            used = {retrieved.rows[c.id].provenance for c in snippets if c.id in final}
            _check_fan([s for s in view.sources if f"{s.source_id}@{s.version}" in used],
                       policy)
        pieces = prompt_pieces(layout, final, policy)
        warnings = [] if shed.fits else [
            f"brief is {shed.size} tokens, over the {policy.max_tokens}-token budget after "
            "every drop step"]
        shown = {c.id for c in snippets if c.id in final}
        report = BriefReport(
            agent_id=view.persona.agent_id if view.persona else None, kb_mode=policy.kb_mode,
            max_tokens=policy.max_tokens, tokens=shed.size, over_budget=not shed.fits,
            query_terms=len(set(query)),
            indexed_snippets=len(index.snippets) if index is not None else 0,
            snippets=_final_rows(retrieved, engine),
            shown_snippets=len(shown), masked_entities=len(fog.masked),
            masked_snippets=retrieved.masked, rejected_snippets=retrieved.rejected,
            removals=retrieved.removals, redactions=retrieved.redactions,
            facts_shown=sum(1 for f in facts_all if f.id in final),
            facts_dropped=sum(1 for f in facts_all if f.id not in final),
            summaries=sum(1 for s in summaries if s.id in final),
            summaries_shortened=sum(1 for s in summaries
                                    if engine.decision(s).action == "truncated"))
        sections = [SectionLayout(SECTION_PERSONA), SectionLayout(SECTION_WORLD),
                    SectionLayout(SECTION_EVIDENCE), SectionLayout(SECTION_EVENTS)]
        return engine.finish(profile=self.name, policy_version=policy.version,
                             session=view.stream_id, position=view.position, now=now,
                             pieces=pieces,
                             messages=[Composed(policy.context_role, pieces)],
                             overhead=policy.message_overhead, sections=sections,
                             report=report, warnings=warnings)

    def render(self, assembly: Assembly) -> RenderableType:
        """The retrieved snippets (scores, provenance, decision) and the filter counts."""
        from ctxledger.assembler.profiles.brief.breakdown import brief_table

        return brief_table(report_of(assembly, BriefReport))


# -- parts -----------------------------------------------------------------------------------


def _check_fan(sources: Sequence[Source], policy: BriefPolicy) -> None:
    """Fan mode: each source used must carry the fan compliance (one line names the first
    that does not, in (source_id, version) order)."""
    for source in sorted(sources, key=lambda s: (s.source_id, s.version)):
        compliance = source.compliance or {}
        missing = {key: value for key, value in sorted(policy.fan_compliance.items())
                   if compliance.get(key) != value}
        if missing:
            wanted = ", ".join(f"{key}: {json.dumps(value)}" for key, value in
                               sorted(policy.fan_compliance.items()))
            raise BriefModeError(
                f"kb_mode fan: source {source.source_id}@{source.version} lacks compliance "
                f"{{{wanted}}}")


def _query(view: SessionView, fog: Fog, policy: BriefPolicy, analyzer: Analyzer) -> list[str]:
    messages = view.history.messages if view.history is not None else ()
    recent = list(messages)[-policy.recent_messages:] if policy.recent_messages else []
    texts = [message.content for message in recent] + [e.name for e in fog.visible]
    return [term for text in texts for term in analyzer.terms(text)]


def _beliefs(engine: Engine, view: SessionView, fog: Fog) -> list[Candidate]:
    raw = view.persona.beliefs if view.persona is not None else None
    if raw is None:
        return []
    items = raw if isinstance(raw, list) else [raw]
    out = []
    for number, item in enumerate(items):
        text = item if isinstance(item, str) else json.dumps(item, sort_keys=True)
        candidate = engine.candidate(f"belief:{number}", SECTION_PERSONA, text)
        out.append(_fogged(engine, candidate, fog, "persona_belief"))
    return out


def _fogged(engine: Engine, candidate: Candidate, fog: Fog, reason: str) -> Candidate:
    """Include ``candidate``, with masked names replaced (a rewrite) if it has any."""
    named = fog.masked_in(candidate.text)
    if named:
        return engine.rewrite(candidate, fog.redact(candidate.text), "fog_of_war_redacted",
                              masked_entities=named)
    return engine.include(candidate, reason)


def _entities(engine: Engine, fog: Fog, sanitizer: Sanitizer,
              policy: BriefPolicy) -> tuple[list[_EntityBlock], list[Candidate]]:
    blocks: list[_EntityBlock] = []
    facts_all: list[Candidate] = []
    for entity in fog.masked:
        hidden = engine.candidate(f"entity:{entity.entity_id}", SECTION_WORLD, "")
        engine.exclude(hidden, "masked", "outside_knowledge_scope", facts=len(entity.facts),
                       tags=list(entity.tags))
    for entity in fog.visible:
        tags = f" ({', '.join(entity.tags)})" if entity.tags else ""
        line = engine.candidate(f"entity:{entity.entity_id}", SECTION_WORLD,
                                f"{BULLET}{entity.name} [{entity.entity_id}]{tags}")
        line = _fogged(engine, line, fog, "within_knowledge_scope")
        facts = []
        for number, fact in enumerate(entity.facts):
            clean = sanitizer.clean(fact.text)
            text = f"{clean.text} [{entity.entity_id}]"
            candidate = engine.candidate(f"fact:{entity.entity_id}:{number}", SECTION_WORLD,
                                         f"{fact.text} [{entity.entity_id}]",
                                         priority=1 if fact.critical else 0)
            named = fog.masked_in(text)
            if clean.changes or named:
                detail: dict[str, Any] = dict(change_detail(clean.changes))
                if named:
                    text = fog.redact(text)
                    detail["masked_entities"] = named
                candidate = engine.rewrite(candidate, text, "sanitized", critical=fact.critical,
                                           **detail)
            else:
                candidate = engine.include(candidate, "within_knowledge_scope",
                                           critical=fact.critical)
            facts.append(candidate)
            facts_all.append(candidate)
        blocks.append(_EntityBlock(line, facts))
    return blocks, facts_all


@dataclass(slots=True)
class _Retrieved:
    """Everything about the retrieved snippets the report needs."""

    rows: dict[str, SnippetRow]
    """By candidate id, in retrieval order."""
    kept: list[Candidate]
    """Selected by MMR, in MMR order."""
    removals: int = 0
    redactions: int = 0
    masked: int = 0
    rejected: int = 0


def _snippets(engine: Engine, index: SnippetIndex | None, scores: Scores | None,
              sources: Mapping[tuple[str, str], Source], fog: Fog, sanitizer: Sanitizer,
              policy: BriefPolicy) -> _Retrieved:
    out = _Retrieved({}, [])
    if index is None or scores is None:
        return out
    eligible: list[tuple[Snippet, Candidate, float, float]] = []
    vectors: dict[str, Counter[str]] = {}
    for doc in rank_order(scores)[:policy.retrieve_k]:
        snippet = index.snippets[int(doc)]
        score = round_score(float(scores[int(doc)]))
        candidate = engine.candidate(f"snippet:{snippet.snippet_id}", SECTION_EVIDENCE,
                                     f"[{provenance(snippet)}] {snippet.text}")
        out.rows[candidate.id] = SnippetRow(snippet_id=snippet.snippet_id,
                                            provenance=provenance(snippet), retrieval=score,
                                            action="", reason="")
        source = sources.get((snippet.source_id, snippet.source_version))
        if source is None or (policy.kb_mode == "neutral" and source.neutral is not True):
            out.rejected += 1
            engine.exclude(candidate, "rejected", "source_not_registered" if source is None
                           else "source_not_neutral", retrieval=score,
                           provenance=provenance(snippet))
            continue
        named = fog.masked_in(snippet.text, snippet.entities)
        if named:
            out.masked += 1
            engine.exclude(candidate, "masked", "names_masked_entity", retrieval=score,
                           masked_entities=named)
            continue
        eligible.append((snippet, candidate, score, round_score(source.trust)))
        vectors[candidate.id] = Counter(index.terms[int(doc)])  # the analyzer's, cached
    items = relevance_items([(candidate.id, score, trust, vectors[candidate.id])
                             for _, candidate, score, trust in eligible])
    picked = select(items, lam=policy.mmr_lambda, limit=policy.max_snippets)
    by_id = {candidate.id: (snippet, candidate, score)
             for snippet, candidate, score, _ in eligible}
    for pick in [*picked.picked, *picked.rest]:
        row = out.rows[pick.item.item_id]
        out.rows[pick.item.item_id] = row.model_copy(update={
            "trust": pick.item.trust, "relevance": pick.item.relevance, "mmr": pick.mmr,
            "mmr_rank": pick.rank})
    for pick in picked.picked:
        snippet, candidate, score = by_id[pick.item.item_id]
        numbers: dict[str, Any] = {
            "retrieval": score, "trust": pick.item.trust, "relevance": pick.item.relevance,
            "mmr": pick.mmr, "mmr_rank": pick.rank, "max_similarity": pick.max_similarity,
            "provenance": provenance(snippet)}
        clean = sanitizer.clean(snippet.text)
        if clean.changes:
            out.removals += sum(1 for c in clean.changes if c.replacement == "")
            out.redactions += sum(1 for c in clean.changes if c.replacement != "")
            out.kept.append(engine.rewrite(
                candidate, f"[{provenance(snippet)}] {clean.text}", "sanitized",
                **change_detail(clean.changes), **numbers))
        else:
            out.kept.append(engine.include(candidate, "mmr_selected", **numbers))
    for pick in picked.rest:
        _, candidate, score = by_id[pick.item.item_id]
        engine.exclude(candidate, "dropped", "mmr_not_selected", retrieval=score,
                       trust=pick.item.trust, relevance=pick.item.relevance, mmr=pick.mmr,
                       mmr_rank=pick.rank, max_snippets=policy.max_snippets)
    return out


def _final_rows(retrieved: _Retrieved, engine: Engine) -> list[SnippetRow]:
    """The rows with each snippet's final decision (after the budget)."""
    rows = []
    for item, row in retrieved.rows.items():
        decision = engine.decision(Candidate(item, SECTION_EVIDENCE, "", 0))
        rows.append(row.model_copy(update={"action": decision.action,
                                           "reason": decision.reason}))
    return rows


def _summaries(engine: Engine, view: SessionView, fog: Fog) -> list[Candidate]:
    out = []
    for ended in reversed(view.ended_sessions):  # oldest first
        if ended.summary:
            candidate = engine.candidate(f"summary:session:{ended.stream_id}",
                                         SECTION_EVENTS, ended.summary)
            out.append(_fogged(engine, candidate, fog, "earlier_session_summary"))
    summary = view.history.summary if view.history is not None else None
    if summary is not None and summary.summary:
        candidate = engine.candidate("summary:history", SECTION_EVENTS, summary.summary)
        out.append(_fogged(engine, candidate, fog, "history_summary"))
    return out


def _steps(layout: _Layout, facts: Sequence[Candidate], query: Mapping[str, int],
           analyzer: Analyzer, counter: TokenCounter, policy: BriefPolicy) -> list[ShedStep]:
    steps = [ShedStep((snippet,), reason="over_budget_lowest_mmr")
             for snippet in reversed(layout.snippets)]

    def shorten(candidate: Candidate, overflow: int) -> str:
        target = max(policy.summary_min_tokens, candidate.tokens - overflow)
        low, high = 0, candidate.chars  # the longest prefix (with "...") within target
        while low < high:
            middle = (low + high + 1) // 2
            if counter.count(shorten_to(candidate.text, middle)) <= target:
                low = middle
            else:
                high = middle - 1
        return shorten_to(candidate.text, low)

    steps += [ShedStep((summary,), shrink=shorten, reason="over_budget_summary_shortened")
              for summary in layout.summaries if summary.tokens > policy.summary_min_tokens]
    optional = [fact for fact in facts if fact.priority == 0]
    by_relevance = ranked(optional, key=lambda fact: (
        cosine(analyzer.vector(fact.text), query), fact.id))
    steps += [ShedStep((fact,), reason="over_budget_non_critical_fact")
              for fact in by_relevance]
    return steps


# -- rendering -----------------------------------------------------------------------------


def _bulleted(candidate: Candidate, section: str) -> list[Piece]:
    return [Frame(BULLET, section), candidate]


def prompt_pieces(layout: _Layout, kept: Mapping[str, Candidate],
                  policy: BriefPolicy) -> list[Piece]:
    """The brief as pieces for the kept candidates (by id)."""
    blocks: list[list[Piece]] = [[Frame(layout.title)]]
    beliefs = [kept[c.id] for c in layout.beliefs if c.id in kept]
    if beliefs:
        blocks.append(joined([[Frame(policy.persona_heading, SECTION_PERSONA)],
                              *(_bulleted(c, SECTION_PERSONA) for c in beliefs)],
                             "\n", SECTION_PERSONA))
    world: list[list[Piece]] = []
    for block in layout.entities:
        if block.line.id not in kept:
            continue
        world.append([kept[block.line.id]])
        world += [[Frame(FACT_BULLET, SECTION_WORLD), kept[f.id]]
                  for f in block.facts if f.id in kept]
    if world:
        blocks.append(joined([[Frame(policy.world_heading, SECTION_WORLD)], *world], "\n",
                             SECTION_WORLD))
    evidence = [kept[c.id] for c in layout.snippets if c.id in kept]
    if evidence:
        blocks.append(joined([[Frame(policy.evidence_heading, SECTION_EVIDENCE)],
                              *(_bulleted(c, SECTION_EVIDENCE) for c in evidence)],
                             "\n", SECTION_EVIDENCE))
    events = [kept[c.id] for c in layout.summaries if c.id in kept and kept[c.id].text]
    if events:
        blocks.append(joined([[Frame(policy.events_heading, SECTION_EVENTS)],
                              *(_bulleted(c, SECTION_EVENTS) for c in events)],
                             "\n", SECTION_EVENTS))
    return joined(blocks, "\n\n")
