"""The ``brief`` profile's report: retrieval and MMR per snippet, and the filters' counts."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from ctxledger.assembler.report import ProfileReport


class SnippetRow(BaseModel):
    """A retrieved snippet: its scores, provenance and what became of it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    snippet_id: str
    provenance: str
    """``source_id@version``."""
    retrieval: float
    """The retrieval score (BM25, or the fused score with several scorers)."""
    trust: float | None = None
    relevance: float | None = None
    """Retrieval × trust, normalized to [0, 1] over the eligible snippets."""
    mmr: float | None = None
    mmr_rank: int | None = None
    action: str
    reason: str


class BriefReport(ProfileReport):
    """The ``brief`` profile's figures (Novel Engine's TurnBrief)."""

    profile: Literal["brief"] = "brief"
    agent_id: str | None = None
    kb_mode: str
    max_tokens: int
    tokens: int
    over_budget: bool
    query_terms: int
    indexed_snippets: int
    snippets: list[SnippetRow]
    """Retrieved snippets in retrieval order."""
    shown_snippets: int
    masked_entities: int
    masked_snippets: int
    rejected_snippets: int
    removals: int
    """Instruction-like phrases removed from retrieved text."""
    redactions: int
    """Banned terms redacted."""
    facts_shown: int
    facts_dropped: int
    summaries: int
    summaries_shortened: int
