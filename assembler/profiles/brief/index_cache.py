"""The scope's snippet index (analyzed snippets + BM25) and its in-process memo.

Where it lives and why that keeps the assembler pure: the memo is a bounded dict in the
assembler's process, keyed by (scope, analyzer/BM25 policy fields). An index is a pure
function of the scope's snippet set, which its ``SnippetBase`` (the snippet event's
position and chained hash) names in any database. The read view is offered the memo's
indexes of the scope through ``ViewRequest.snippet_probe``; only when the log really
extends one (same hash at that position) does it load just the snippets put after it, and it
passes the very index object on in ``SessionView.snippets_since``. So the assembly stays a
function of its view: either every snippet is in it, or the index of the older ones plus
the newer ones. The memo changes time, never results, and never enters a digest.

A new message reuses the index as it is (no snippet is read or analyzed); a new or
replaced snippet extends it: only its text is analyzed, and the BM25 matrix is rebuilt
from the cached terms (idf changes with every document, so it cannot be patched).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field

from ctxledger.assembler.errors import AssemblyError
from ctxledger.assembler.profiles.brief.analyzer import Analyzer
from ctxledger.assembler.profiles.brief.bm25 import Bm25Scorer
from ctxledger.projections.session_view import SessionView, Snippet, SnippetBase

CACHE_ENTRIES = 16
"""Indexes the memo keeps (least recently used go first)."""
PER_SCOPE = 4
"""Indexes offered for one scope and key: several databases may share a scope name."""


@dataclass(frozen=True, slots=True)
class SnippetIndex(SnippetBase):
    """Every snippet of a scope (by snippet_id), their terms and a BM25 scorer over them."""

    key: Hashable = None
    snippets: tuple[Snippet, ...] = ()
    terms: tuple[tuple[str, ...], ...] = ()
    bm25: Bm25Scorer | None = field(default=None, compare=False)


def build_index(head: SnippetBase, key: Hashable, analyzer: Analyzer, *, k1: float,
                b: float, base: SnippetIndex | None,
                changed: Sequence[Snippet]) -> SnippetIndex:
    """The index at ``head``: ``base`` with ``changed`` put over it by snippet_id (or
    ``changed`` alone without a base). Only the changed snippets are analyzed."""
    by_id: dict[str, tuple[Snippet, tuple[str, ...]]] = {}
    if base is not None:
        by_id = {snippet.snippet_id: (snippet, terms)
                 for snippet, terms in zip(base.snippets, base.terms, strict=True)}
    for snippet in changed:
        by_id[snippet.snippet_id] = (snippet, tuple(analyzer.terms(snippet.text)))
    ordered = [by_id[snippet_id] for snippet_id in sorted(by_id)]
    snippets = tuple(snippet for snippet, _ in ordered)
    terms = tuple(doc for _, doc in ordered)
    return SnippetIndex(head.position, head.event_hash, key=key, snippets=snippets,
                        terms=terms, bm25=Bm25Scorer(terms, k1=k1, b=b))


class IndexMemo:
    """Recent ``SnippetIndex``es by (scope, key, position, hash), at most ``capacity``
    (least recently used go first). Thread-safe; entries are immutable."""

    def __init__(self, capacity: int = CACHE_ENTRIES) -> None:
        self.capacity = capacity
        self._entries: OrderedDict[tuple[str, Hashable, int, str], SnippetIndex] = \
            OrderedDict()
        self._lock = threading.Lock()
        self.builds = 0
        """Indexes built (full or extended) so far: a benchmark checks it stays put."""

    def offers(self, scope: str, key: Hashable) -> list[SnippetIndex]:
        """The memoized indexes of ``scope`` under ``key``, most recently used first."""
        with self._lock:
            found = [index for (s, k, _, _), index in reversed(self._entries.items())
                     if s == scope and k == key]
            return found[:PER_SCOPE]

    def index_for(self, view: SessionView, key: Hashable, analyzer: Analyzer, *,
                  k1: float, b: float) -> SnippetIndex | None:
        """The index of the view's snippet set (None: the scope has no snippets)."""
        head = view.snippet_head
        since = view.snippets_since
        if head is None:
            if view.snippets:
                raise AssemblyError("the read view holds snippets but no snippet head")
            return None
        if since is not None and not (isinstance(since, SnippetIndex) and since.key == key):
            raise AssemblyError(
                f"session {view.stream_id!r}: the read view holds only the snippets after "
                f"position {since.position}, but no index of the earlier ones for this policy")
        base = since if isinstance(since, SnippetIndex) else None
        if base is not None and base.position == head.position \
                and base.event_hash == head.event_hash and not view.snippets:
            self._touch(view.scope, key, base)
            return base
        index = build_index(head, key, analyzer, k1=k1, b=b, base=base,
                            changed=view.snippets)
        self._remember(view.scope, key, index)
        return index

    def _remember(self, scope: str, key: Hashable, index: SnippetIndex) -> None:
        with self._lock:
            self.builds += 1
            slot = (scope, key, index.position, index.event_hash)
            self._entries[slot] = index
            self._entries.move_to_end(slot)
            while len(self._entries) > self.capacity:
                self._entries.popitem(last=False)

    def _touch(self, scope: str, key: Hashable, index: SnippetIndex) -> None:
        with self._lock:
            slot = (scope, key, index.position, index.event_hash)
            if slot in self._entries:
                self._entries.move_to_end(slot)


MEMO = IndexMemo()
"""The process's memo (see the module docstring)."""
