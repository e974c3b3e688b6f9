"""Matching one lorebook key against a text: a plain substring (case-insensitive unless
the entry says otherwise) or, for V3 ``use_regex`` entries, a regular expression.

A regex key is a JavaScript literal ``/pattern/flags`` (flags ``i``, ``m``, ``s`` are
honoured; ``u`` is how Python reads every pattern; the rest, ``g`` among them, mean
nothing to a search) or a bare pattern. Patterns come from downloaded cards, so each
search runs under ``REGEX_TIMEOUT`` (the ``regex`` module's timeout): a key that takes
longer does not match. That timeout is the one place where an activation could depend on
the machine; a pattern that needs it is pathological.

Plain keys are plain substring tests (``in`` on the casefolded text): with a few thousand
keys per book a message of a thousand characters is scanned in about a millisecond, so
no automaton (Aho-Corasick) is worth its build time and its dependency.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Final

import regex

REGEX_TIMEOUT: Final = 0.25
"""Seconds one regex key may search one text before it counts as not matching."""
# JavaScript's flag letters only: "/usr/bin" is a bare pattern, not /usr/ with flags.
_LITERAL = regex.compile(r"/(.+)/([dgimsuvy]*)", regex.DOTALL)
_FLAGS: Final = {"i": regex.IGNORECASE, "m": regex.MULTILINE, "s": regex.DOTALL}


class KeyTimeout(Exception):
    """A regex key ran past ``REGEX_TIMEOUT`` on a text."""


@dataclass(frozen=True, slots=True)
class Matcher:
    """One key, ready to search texts. ``error`` says why it can never match (a regex
    that does not compile); a blank key never matches either, without an error."""

    key: str
    """The key as written."""
    case_sensitive: bool
    use_regex: bool
    needle: str | None
    """A plain key's text to find (casefolded unless case-sensitive); None for a regex
    key or a blank one."""
    pattern: Any
    """A regex key's compiled pattern (``regex.Pattern``), else None."""
    error: str | None

    def search(self, text: str, folded: str) -> bool:
        """Whether the key occurs in ``text`` (``folded`` is ``text.casefold()``).
        Raises ``KeyTimeout`` when a regex key runs past ``REGEX_TIMEOUT``."""
        if self.needle is not None:
            return self.needle in (text if self.case_sensitive else folded)
        if self.pattern is None:
            return False
        try:
            return self.pattern.search(text, timeout=REGEX_TIMEOUT) is not None
        except TimeoutError:
            raise KeyTimeout(self.key) from None


@functools.lru_cache(maxsize=16_384)
def compile_key(key: str, *, case_sensitive: bool, use_regex: bool) -> Matcher:
    """The matcher of ``key`` (cached: a card's keys are compiled once per process)."""
    if not key.strip():
        return Matcher(key, case_sensitive, use_regex, None, None, None)
    if not use_regex:
        return Matcher(key, case_sensitive, use_regex,
                       key if case_sensitive else key.casefold(), None, None)
    source, flags = key, 0
    literal = _LITERAL.fullmatch(key)
    if literal is not None:
        source = literal.group(1)
        for letter in literal.group(2):
            flags |= _FLAGS.get(letter, 0)
    if not case_sensitive:
        flags |= regex.IGNORECASE
    if not source.strip():
        return Matcher(key, case_sensitive, use_regex, None, None, None)
    try:
        pattern = regex.compile(source, flags)
    except (regex.error, ValueError, OverflowError) as exc:
        return Matcher(key, case_sensitive, use_regex, None, None, str(exc))
    return Matcher(key, case_sensitive, use_regex, None, pattern, None)
