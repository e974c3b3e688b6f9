"""The one text analyzer of the ``brief`` profile, shared by BM25 and MMR: NFKC, casefold,
a word regex, a fixed English stopword list and a Snowball stemmer.

PyStemmer (C) is used when it imports, else snowballstemmer (pure Python); both run the
same Snowball algorithm, so the terms are the same either way. No NLTK, no download.
"""

from __future__ import annotations

import re
import threading
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from functools import lru_cache


def _stemmer(language: str) -> Callable[[list[str]], list[str]]:
    try:
        import Stemmer

        stemmer = Stemmer.Stemmer(language)
        return lambda words: list(stemmer.stemWords(words))
    except ImportError:  # pragma: no cover - PyStemmer is a dependency; the fallback is
        import snowballstemmer  # for platforms without a wheel for it

        fallback = snowballstemmer.stemmer(language)
        return lambda words: list(fallback.stemWords(words))


class Analyzer:
    """Text -> terms. Deterministic: no dict or set order reaches its output."""

    def __init__(self, *, word_pattern: str, stopwords: Iterable[str], language: str) -> None:
        self._words = re.compile(word_pattern)
        self._stopwords = frozenset(self.normalize(word) for word in stopwords)
        self._language = language
        # A stemmer object is not safe to share between threads: one per thread.
        self._local = threading.local()

    def _stem(self, words: list[str]) -> list[str]:
        stem: Callable[[list[str]], list[str]] | None = getattr(self._local, "stem", None)
        if stem is None:
            stem = self._local.stem = _stemmer(self._language)
        return stem(words)

    @staticmethod
    def normalize(text: str) -> str:
        """NFKC, then casefold (so "ﬁre", "FIRE" and "fire" are one term)."""
        return unicodedata.normalize("NFKC", text).casefold()

    def terms(self, text: str) -> list[str]:
        """The stemmed non-stopword words of ``text``, in text order."""
        words = [word for word in self._words.findall(self.normalize(text))
                 if word not in self._stopwords]
        return self._stem(words) if words else []

    def terms_many(self, texts: Sequence[str]) -> list[list[str]]:
        """``terms`` of each of ``texts``."""
        return [self.terms(text) for text in texts]

    def vector(self, text: str) -> Counter[str]:
        """Term frequencies of ``text`` (for cosine similarity)."""
        return Counter(self.terms(text))


@lru_cache(maxsize=8)
def analyzer_for(word_pattern: str, stopwords: tuple[str, ...], language: str) -> Analyzer:
    """The analyzer for these settings (built once per process)."""
    return Analyzer(word_pattern=word_pattern, stopwords=stopwords, language=language)
