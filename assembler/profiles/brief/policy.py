"""The ``brief`` profile's policy (SPEC §3 "Profile brief"): budgets, retrieval
and MMR numbers, the analyzer, the sanitizing patterns and the knowledge-base mode, as
data with SPEC's defaults."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ctxledger.assembler.policy import Policy

KbMode = Literal["neutral", "fan"]

# A fixed English list (no NLTK download): function words that carry no retrieval signal.
ENGLISH_STOPWORDS: tuple[str, ...] = (
    "a", "about", "above", "after", "again", "against", "all", "am", "an", "and", "any",
    "are", "as", "at", "be", "because", "been", "before", "being", "below", "between",
    "both", "but", "by", "can", "could", "did", "do", "does", "doing", "down", "during",
    "each", "few", "for", "from", "further", "had", "has", "have", "having", "he", "her",
    "here", "hers", "herself", "him", "himself", "his", "how", "i", "if", "in", "into",
    "is", "it", "its", "itself", "just", "me", "more", "most", "my", "myself", "no", "nor",
    "not", "now", "of", "off", "on", "once", "only", "or", "other", "our", "ours",
    "ourselves", "out", "over", "own", "same", "she", "should", "so", "some", "such",
    "than", "that", "the", "their", "theirs", "them", "themselves", "then", "there",
    "these", "they", "this", "those", "through", "to", "too", "under", "until", "up",
    "very", "was", "we", "were", "what", "when", "where", "which", "while", "who", "whom",
    "why", "will", "with", "would", "you", "your", "yours", "yourself", "yourselves",
)


class InjectionPattern(BaseModel):
    """An instruction-like phrase removed from retrieved text (``name`` is recorded)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    regex: str


_SENTENCE_REST = r"[^.!?\n]*[.!?]?[ \t]*"
"""The rest of the sentence a match starts (an injected instruction goes as a whole)."""

DEFAULT_INJECTIONS: tuple[InjectionPattern, ...] = (
    InjectionPattern(name="ignore_previous_instructions",
                     regex=r"(?i)\bignore\s+(?:all\s+)?(?:the\s+)?previous\s+instructions\b"
                           + _SENTENCE_REST),
    InjectionPattern(name="disregard_the_above",
                     regex=r"(?i)\bdisregard\s+(?:all\s+)?(?:of\s+)?the\s+above\b"
                           + _SENTENCE_REST),
    InjectionPattern(name="you_are_now", regex=r"(?i)\byou\s+are\s+now\b" + _SENTENCE_REST),
    InjectionPattern(name="fake_role_marker",
                     regex=r"(?im)(?:^|(?<=[.!?]))[ \t]*(?:<\|im_start\|>|"
                           r"(?:system|assistant|user|developer)[ \t]*:)" + _SENTENCE_REST),
)


class BriefPolicy(Policy):
    """Policy of the ``brief`` profile. Settings (key -> field):

    ``brief_max_tokens`` -> max_tokens, ``brief_max_snippets`` -> max_snippets,
    ``brief_recent_messages`` -> recent_messages, ``mmr_lambda`` -> mmr_lambda,
    ``bm25_k1`` -> k1, ``bm25_b`` -> b, ``kb_mode`` -> kb_mode, ``banned_terms`` ->
    banned_terms, ``token_encoding`` -> token_encoding,
    ``context_role`` -> context_role; ``policy.brief`` -> any field.
    """

    REVISION: ClassVar[int] = 2
    """2: ``max_tokens`` holds for the brief sent as one chat message (its wrapper and
    the reply priming count), so a brief at the limit keeps a little less."""
    SETTINGS: ClassVar[Mapping[str, str]] = {
        "brief_max_tokens": "max_tokens",
        "brief_max_snippets": "max_snippets",
        "brief_recent_messages": "recent_messages",
        "mmr_lambda": "mmr_lambda",
        "bm25_k1": "k1",
        "bm25_b": "b",
        "kb_mode": "kb_mode",
        "banned_terms": "banned_terms",
        "token_encoding": "token_encoding",
        "model": "model",
        "context_role": "context_role",
    }

    profile: Literal["brief"] = "brief"
    max_tokens: int = Field(default=2500, gt=0)
    """The whole brief, as ``tokens.total``."""
    max_snippets: int = Field(default=8, ge=0)
    mmr_lambda: float = Field(default=0.7, ge=0.0, le=1.0)
    retrieve_k: int = Field(default=32, ge=1)
    """Snippets taken by retrieval score before provenance, mode and fog filter them."""
    rrf_k: int = Field(default=60, ge=1)
    """Reciprocal-rank fusion constant, used when more than one scorer is fused."""
    k1: float = Field(default=1.5, ge=0.0)
    b: float = Field(default=0.75, ge=0.0, le=1.0)
    recent_messages: int = Field(default=6, ge=0)
    """The query is the last N messages plus the names of the visible entities."""
    summary_limit: int = Field(default=5, ge=0)
    """How many of the scope's earlier sessions' end summaries are candidates."""
    summary_min_tokens: int = Field(default=8, ge=0)
    """A summary is never shortened below this (it is shortened, not dropped)."""
    kb_mode: KbMode = "neutral"
    fan_compliance: dict[str, Any] = Field(
        default_factory=lambda: {"non_commercial": True, "distribution": "local_only"})
    """What every source needs in fan mode."""
    banned_terms: tuple[str, ...] = ()
    redaction: str = "[redacted]"
    injections: tuple[InjectionPattern, ...] = DEFAULT_INJECTIONS
    word_pattern: str = r"\w+"
    stopwords: tuple[str, ...] = ENGLISH_STOPWORDS
    stemmer_language: str = "english"
    title: str = "# TurnBrief"
    persona_heading: str = "## Persona"
    world_heading: str = "## World State"
    evidence_heading: str = "## Evidence"
    events_heading: str = "## Past Events"

    @model_validator(mode="after")
    def _compiles(self) -> BriefPolicy:
        for pattern in (self.word_pattern, *(item.regex for item in self.injections)):
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"{pattern!r} is not a regular expression: {exc}") from None
        if any(not term.strip() for term in self.banned_terms):
            raise ValueError("banned_terms must not contain empty terms")
        return self

    @classmethod
    def overlay_setting(cls, field: str, current: Any, value: Any) -> Any:
        """``banned_terms`` may be given as one string."""
        if field == "banned_terms" and isinstance(value, str):
            return [value]
        return value

    @property
    def analyzer_key(self) -> tuple[Any, ...]:
        """What the snippet index depends on besides the snippets (its cache key)."""
        return (self.word_pattern, self.stopwords, self.stemmer_language, self.k1, self.b)
