"""Observations of a project, as the coding-agent surfaces record and search them.

Recording checks the arguments before anything is written. Searching is BM25 over the
scope's observations (their text and files), with the ``brief`` profile's analyzer and
BM25 (``assembler/profiles/brief``) at that policy's defaults, so there is one retrieval
code path in the project; each hit carries its provenance in the log.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, get_args

from ctxledger.projections.scope_sessions import ScopeObservation
from ctxledger.store.clock import format_utc
from ctxledger.store.errors import InvalidArgument

MAX_FILES = 100
MAX_FILE_CHARS = 1000
MAX_SEARCH_LIMIT = 100


@dataclass(frozen=True, slots=True)
class ObservationHit:
    """An observation found by ``Ledger.search_observations``, with its provenance."""

    event_id: str
    position: int
    session: str
    kind: str
    text: str
    files: tuple[str, ...]
    recorded_at: datetime
    score: float

    def to_json(self) -> dict[str, Any]:
        """JSON-ready data (time as ISO-8601 UTC)."""
        return {"event_id": self.event_id, "position": self.position,
                "session": self.session, "kind": self.kind, "text": self.text,
                "files": list(self.files), "recorded_at": format_utc(self.recorded_at),
                "score": self.score}


def observation_kinds() -> tuple[str, ...]:
    """The kinds an observation may have (the event model's)."""
    from ctxledger.store.catalog import ObservationRecorded

    kind = ObservationRecorded.model_fields["kind"].annotation
    return tuple(str(value) for value in get_args(kind))


def check_observation(kind: str, text: str, files: Sequence[str]) -> tuple[str, ...]:
    """Raise ``InvalidArgument`` (one line) unless the observation can be recorded;
    return its files."""
    kinds = observation_kinds()
    if kind not in kinds:
        raise InvalidArgument(f"kind must be one of {', '.join(kinds)}, got {kind!r}")
    if not isinstance(text, str) or not text.strip():
        raise InvalidArgument("text must not be empty")
    if isinstance(files, str):
        raise InvalidArgument("files must be a list of paths, not one string")
    if len(files) > MAX_FILES:
        raise InvalidArgument(f"files: at most {MAX_FILES}, got {len(files)}")
    for index, name in enumerate(files):
        if not isinstance(name, str) or not name.strip():
            raise InvalidArgument(f"files[{index}] must be a non-empty path")
        if len(name) > MAX_FILE_CHARS:
            raise InvalidArgument(f"files[{index}] is longer than {MAX_FILE_CHARS} characters")
    return tuple(files)


def check_search(query: str, limit: int) -> None:
    """Raise ``InvalidArgument`` (one line) for a blank query or a limit out of range."""
    if not isinstance(query, str) or not query.strip():
        raise InvalidArgument("query must not be empty")
    if isinstance(limit, bool) or not 1 <= limit <= MAX_SEARCH_LIMIT:
        raise InvalidArgument(f"limit must be between 1 and {MAX_SEARCH_LIMIT}, got {limit!r}")


def rank_observations(found: Sequence[ScopeObservation], query: str,
                      limit: int) -> list[ObservationHit]:
    """The ``limit`` observations BM25 scores highest for ``query`` (score rounded, then
    the newest first); those sharing no term with the query are left out."""
    from ctxledger.assembler.profiles.brief.analyzer import analyzer_for
    from ctxledger.assembler.profiles.brief.bm25 import Bm25Scorer, rank_order
    from ctxledger.assembler.profiles.brief.policy import BriefPolicy
    from ctxledger.assembler.ranking import round_score

    policy = BriefPolicy()
    analyzer = analyzer_for(policy.word_pattern, policy.stopwords, policy.stemmer_language)
    # Indexed newest first: rank_order breaks ties by index, so a tie goes to the newest.
    newest_first = sorted(found, key=lambda item: -item.position)
    documents = analyzer.terms_many(
        [" ".join((item.content, *item.files)) for item in newest_first])
    scores = Bm25Scorer(documents, k1=policy.k1, b=policy.b).scores(analyzer.terms(query))
    return [ObservationHit(event_id=item.event_id, position=item.position,
                           session=item.session, kind=item.kind, text=item.content,
                           files=item.files, recorded_at=item.recorded_at,
                           score=round_score(float(scores[index])))
            for index in rank_order(scores)[:limit].tolist()
            for item in (newest_first[index],)]
