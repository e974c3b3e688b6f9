"""What importing a lorebook reports: each entry of a ``card.set``'s ``character_book``
or a ``lorebook.set``'s book that cannot work as written (a regex key RE2 refuses, an
invalid one, a bad decorator), as ``Book.warnings`` words it. An import still goes ahead:
the assembly decides such an entry (``regex_unsupported``...) every time it reads it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ctxledger.assembler.lorebook import book_warnings
from ctxledger.assembler.profiles.card.lore import CARD_BOOK, SCOPE_BOOK_PREFIX
from ctxledger.store.log import EventInput
from ctxledger.store.records import NewEvent

BOOK_EVENTS = frozenset({"card.set", "lorebook.set"})
"""The event types that carry a lorebook."""


def lorebook_warnings(batch: Sequence[EventInput]) -> tuple[str, ...]:
    """One line per entry problem of the books ``batch`` sets, in event order."""
    found: list[str] = []
    for event in batch:
        kind, data = ((event.type, event.data) if isinstance(event, NewEvent)
                      else (event.get("type"), event.get("data")))
        if not isinstance(data, Mapping):
            continue
        if kind == "card.set":
            found += book_warnings(CARD_BOOK, _card_fields(data).get("character_book"))
        elif kind == "lorebook.set" and isinstance(data.get("book_id"), str):
            found += book_warnings(SCOPE_BOOK_PREFIX + data["book_id"], data.get("book"))
    return tuple(found)


def _card_fields(data: Mapping[str, Any]) -> Mapping[str, Any]:
    """A card's fields: under ``data`` in a V2/V3 file's form, else at the top."""
    inner = data.get("data")
    return inner if data.get("spec") is not None and isinstance(inner, Mapping) else data
