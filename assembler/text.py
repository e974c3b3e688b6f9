"""Small text helpers shared by profiles."""

from __future__ import annotations

ELLIPSIS = "..."


def one_line(text: str) -> str:
    """``text`` with every run of whitespace (newlines included) turned into one space."""
    return " ".join(text.split())


def cut(text: str, max_chars: int, ellipsis: str = ELLIPSIS) -> str:
    """``text`` if it has at most ``max_chars`` characters, else its first ``max_chars``
    characters followed by ``ellipsis`` (Laminark's ``truncate``)."""
    if len(text) <= max_chars:
        return text
    return text[:max(0, max_chars)] + ellipsis


def shorten_to(text: str, max_chars: int, ellipsis: str = ELLIPSIS) -> str:
    """``text`` shortened so the result, ellipsis included, has at most ``max_chars``."""
    if len(text) <= max_chars:
        return text
    if max_chars <= len(ellipsis):
        return ""
    return text[:max_chars - len(ellipsis)] + ellipsis
