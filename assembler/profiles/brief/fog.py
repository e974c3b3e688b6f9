"""Fog of war: which entities the persona may know about.

An entity is visible when its id or one of its tags is in the persona's
``knowledge_scope``; the others are masked and never printed. A text names a masked
entity when the masked entity is listed on it (a snippet's ``entities``) or its name
occurs in the text (NFKC, casefolded), so a snippet that also names a visible entity is
still masked, and other text has the masked names replaced.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence

from ctxledger.projections.session_view import Entity, Persona

MASK = "[unknown]"


def _fold(text: str) -> str:
    return unicodedata.normalize("NFKC", text).casefold()


class Fog:
    """The persona's view of the scope's entities."""

    def __init__(self, entities: Sequence[Entity], persona: Persona | None) -> None:
        scope = set(persona.knowledge_scope) if persona is not None else set()
        self.visible = [e for e in entities
                        if e.entity_id in scope or any(tag in scope for tag in e.tags)]
        self.masked = [e for e in entities if e not in self.visible]
        self._masked_ids = {e.entity_id for e in self.masked}
        # Longest names first, so a name containing another is matched whole.
        names = sorted({_fold(e.name) for e in self.masked if e.name.strip()},
                       key=lambda name: (-len(name), name))
        self._names = re.compile("|".join(re.escape(name) for name in names)) \
            if names else None
        self._name_of = {_fold(e.name): e.entity_id for e in self.masked}

    def masked_in(self, text: str, listed: Sequence[str] = ()) -> list[str]:
        """Ids of the masked entities ``listed`` or named in ``text``, sorted."""
        found = {entity for entity in listed if entity in self._masked_ids}
        if self._names is not None:
            found |= {self._name_of[m.group(0)] for m in self._names.finditer(_fold(text))}
        return sorted(found)

    def redact(self, text: str) -> str:
        """``text`` with every masked name replaced by ``MASK``.

        Matching is on the folded text; NFKC can change lengths, so the text is folded
        only when it has to be (a name found) and the result is the folded text's form.
        """
        if self._names is None:
            return text
        folded = _fold(text)
        if not self._names.search(folded):
            return text
        if len(folded) == len(text):
            out, at = [], 0
            for m in self._names.finditer(folded):
                out.append(text[at:m.start()])
                out.append(MASK)
                at = m.end()
            out.append(text[at:])
            return "".join(out)
        return self._names.sub(MASK, folded)
