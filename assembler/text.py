"""Small text helpers shared by profiles, and the two units a text's length is counted in.

A JavaScript app measures a string by ``.length``: UTF-16 code units, so a character
outside the Basic Multilingual Plane (most emoji) counts 2. Python's ``len`` counts code
points. A profile reproducing an app counts in that app's unit (its policy's
``length_unit``).
"""

from __future__ import annotations

from typing import Literal

ELLIPSIS = "..."

LengthUnit = Literal["utf16", "codepoints"]
"""``utf16``: UTF-16 code units (JavaScript's ``String.length``); ``codepoints``: Python's
``len``."""

_FIRST_ASTRAL = 0x10000


def text_length(text: str, unit: LengthUnit) -> int:
    """The length of ``text`` in ``unit`` (a lone surrogate is one UTF-16 unit too)."""
    if unit == "codepoints" or text.isascii():
        return len(text)
    # surrogatepass: a lone surrogate (valid in a JS string) encodes as its one unit.
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


def prefix_within(text: str, limit: int, unit: LengthUnit) -> str:
    """The longest prefix of ``text`` at most ``limit`` long in ``unit``; it never ends
    inside a code point, so in ``utf16`` it never splits a surrogate pair."""
    if limit <= 0:
        return ""
    if unit == "codepoints" or len(text) <= limit // 2 or text_length(text, unit) <= limit:
        return text[:limit]
    used = 0
    for index, char in enumerate(text):
        used += 2 if ord(char) >= _FIRST_ASTRAL else 1
        if used > limit:
            return text[:index]
    return text


def one_line(text: str) -> str:
    """``text`` with every run of whitespace (newlines included) turned into one space."""
    return " ".join(text.split())


def cut(text: str, max_chars: int, ellipsis: str = ELLIPSIS,
        unit: LengthUnit = "codepoints") -> str:
    """``text`` if it is at most ``max_chars`` long in ``unit``, else its longest prefix
    within ``max_chars`` followed by ``ellipsis`` (Laminark's ``truncate``)."""
    if text_length(text, unit) <= max_chars:
        return text
    return prefix_within(text, max_chars, unit) + ellipsis


def shorten_to(text: str, max_chars: int, ellipsis: str = ELLIPSIS,
               unit: LengthUnit = "codepoints") -> str:
    """``text`` shortened so the result, ellipsis included, is at most ``max_chars`` long
    in ``unit``."""
    if text_length(text, unit) <= max_chars:
        return text
    room = max_chars - text_length(ellipsis, unit)
    if room <= 0:
        return ""
    return prefix_within(text, room, unit) + ellipsis
