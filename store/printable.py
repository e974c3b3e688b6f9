"""Characters that cannot be shown safely on a terminal, found and escaped.

Control characters (Unicode category Cc: C0, DEL, C1) move the cursor or start terminal
escape sequences; format characters (Cf: zero-width spaces, bidirectional overrides, the
BOM) are invisible or reorder the text around them; line and paragraph separators (Zl,
Zp) break a line. An identifier holding one reads as another, or rewrites the screen.
"""

from __future__ import annotations

import unicodedata

UNPRINTABLE = frozenset({"Cc", "Cf", "Zl", "Zp"})

_KINDS = {"Cc": "a control character", "Cf": "an invisible format character",
          "Zl": "a line separator", "Zp": "a paragraph separator"}


def _code(char: str) -> str:
    point = ord(char)
    return f"\\x{point:02x}" if point < 0x100 else f"\\u{point:04x}" if point < 0x10000 \
        else f"\\U{point:08x}"


def unprintable_problem(text: str) -> str | None:
    """What the first unprintable character of ``text`` is (e.g. "a control character
    (\\x1b)"), or None when every character prints."""
    if text.isascii() and text.isprintable():
        return None  # the common case, in C
    for char in text:
        kind = unicodedata.category(char)
        if kind in UNPRINTABLE:
            return f"{_KINDS[kind]} ({_code(char)})"
    return None


def escape_unprintable(text: str) -> str:
    """``text`` with each unprintable character written as a Python escape (``\\x1b``)."""
    if text.isascii() and text.isprintable():
        return text
    return "".join(_code(char) if unicodedata.category(char) in UNPRINTABLE else char
                   for char in text)
