"""The ``card`` profile's lorebook step: which entries of the card's book and the scope's
books go into the context, each decided once, and where they go.

- The books: the card's ``character_book`` (policy ``card_lorebook``, on by default as the
  V2 spec asks) first, then the scope's books by id. Each is activated by
  ``assembler.lorebook`` over the newest ``scan_depth`` loaded messages (the book's, else
  the policy's ``lorebook_scan_depth``).
- Every entry gets one decision: ``activated`` (``by`` key, constant or recursion, with the
  key and the message), or dropped as ``not_matched``, ``disabled`` or ``over_budget``
  (the book's ``token_budget``, else the policy's, lowest priority first; the context's
  budget may still shed more, ``overflow_order``'s ``lorebook``).
- Placement: ``before_char`` entries fill the template's ``{{lore_before}}``, the others
  ``{{lore_after}}``, in insertion order; an entry with a depth (V3 ``@@depth``,
  SillyTavern's "at depth") becomes its own message, ``depth`` messages from the end of
  the history, never inside a tool call's unit.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Literal

from ctxledger.assembler.candidates import Candidate
from ctxledger.assembler.decision_engine import Engine
from ctxledger.assembler.lorebook import (
    Activation,
    Book,
    Entry,
    Interner,
    Role,
    ScanMessage,
    activate,
    compile_key,
    fit_budget,
    parse_book,
)
from ctxledger.assembler.profiles.card.policy import CardPolicy
from ctxledger.assembler.profiles.card.report import LoreRow, LoreStatus
from ctxledger.assembler.template import Macros
from ctxledger.projections.session_view import Message, SessionView

CARD_BOOK = "card"
"""The source name of the card's own book (a scope book's is ``world:<book_id>``)."""
SCOPE_BOOK_PREFIX = "world:"


@dataclass(frozen=True, slots=True)
class Placed:
    """An entry that goes into the context, with its candidate."""

    entry: Entry
    candidate: Candidate


@dataclass(frozen=True, slots=True)
class AtDepth:
    """A message placed inside the history: ``depth`` messages from its end."""

    candidate: Candidate
    depth: int
    role: Role


@dataclass(slots=True)
class Lore:
    """The lorebook step's outcome."""

    before: list[Placed] = field(default_factory=list)
    after: list[Placed] = field(default_factory=list)
    depth: list[Placed] = field(default_factory=list)
    """Entries sent as messages inside the history, by depth (deepest first), then
    insertion order."""
    decided: list[tuple[Activation, Candidate]] = field(default_factory=list)
    """Every entry of every book, in book then entry order."""
    over_book_budget: set[str] = field(default_factory=set)
    not_in_template: set[str] = field(default_factory=set)
    """Activated entries the template has no place for."""
    warnings: list[str] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    """The raw contents sent (before macros), for the unknown-macro warning."""
    note: AtDepth | None = None
    """The card's character note (SillyTavern's ``extensions.depth_prompt``)."""
    regex_keys: bool = False
    """Whether a book read has a regex key (the assembly's ``model.format_for``)."""

    def at_depth(self, shed: frozenset[str] = frozenset()) -> list[AtDepth]:
        """What goes inside the history, but ``shed``: the entries with a depth, then
        the character note."""
        placed = [AtDepth(p.candidate, p.entry.depth or 0, p.entry.role or "system")
                  for p in self.depth if p.candidate.id not in shed]
        return placed + ([self.note] if self.note is not None else [])

    @property
    def kept(self) -> list[Placed]:
        """Every entry placed, in prompt order within each place."""
        return [*self.before, *self.after, *self.depth]

    def shed_order(self) -> list[Candidate]:
        """The placed entries, the one to give way first first: the lowest priority,
        then the larger insertion order, then the later book and entry."""
        order = {placed.entry.uid: index for index, placed in enumerate(self.kept)}
        ranked = sorted(self.kept, key=lambda p: (p.entry.priority, -p.entry.insertion_order,
                                                  -order[p.entry.uid]))
        return [placed.candidate for placed in ranked]


def books(view: SessionView, policy: CardPolicy,
          intern: Interner | None = None) -> list[Book]:
    """The books of the session: the card's (when used), then the scope's by id (parsed
    once per content with ``intern``)."""
    found: list[Book] = []
    card_book = view.card.get("character_book")
    if policy.card_lorebook and isinstance(card_book, Mapping):
        found.append(parse_book(CARD_BOOK, card_book, intern=intern))
    found.extend(parse_book(SCOPE_BOOK_PREFIX + scope_book.book_id, scope_book.book,
                            intern=intern)
                 for scope_book in view.lorebooks)
    return found


def decide_lore(engine: Engine, policy: CardPolicy, macros: Macros, view: SessionView,
                messages: Sequence[Message], section_card: str,
                section_history: str) -> Lore:
    """Activate every book over ``messages``, decide each entry and place the kept; and
    the card's character note."""
    lore = Lore(note=_character_note(engine, macros, view.card, section_history))
    if lore.note is not None:
        lore.texts.append(str(view.card["extensions"]["depth_prompt"]["prompt"]))
    memo = engine.memo_for(view.stream_id) if engine.memos is not None else None
    intern = memo.intern if memo is not None else None
    found = books(view, policy, intern)
    # Read only when a book scans it: a long history without lorebooks costs nothing here.
    scan = [ScanMessage(message.message_id, message.content)
            for message in messages] if found else []
    for book in found:
        lore.regex_keys = lore.regex_keys or book.regex_keys
        depth = book.scan_depth if book.scan_depth is not None else policy.lorebook_scan_depth
        activations = activate(book, scan, scan_depth=depth,
                               recursive=policy.lorebook_recursive_scanning, intern=intern)
        candidates: dict[str, Candidate] = {}
        lore.warnings.extend(book.warnings())
        for activation in activations:
            entry = activation.entry
            section = section_history if entry.depth is not None else section_card
            candidates[entry.uid] = engine.candidate(
                entry.uid, section, macros.apply(entry.content))
        active = [a for a in activations if a.status in ("activated", "constant")]
        budget = (book.token_budget if book.token_budget is not None
                  else policy.lorebook_token_budget)
        kept, over = fit_budget(active, {uid: c.tokens for uid, c in candidates.items()},
                                budget)
        kept_ids = {activation.entry.uid for activation in kept}
        over_ids = {activation.entry.uid for activation in over}
        for activation in activations:
            entry, candidate = activation.entry, candidates[activation.entry.uid]
            lore.decided.append((activation, candidate))
            detail = _detail(book, activation)
            if entry.uid in kept_ids and not candidate.text:
                engine.exclude(candidate, "dropped", "empty_entry", **detail)
            elif entry.uid in kept_ids:
                engine.include(candidate, "activated", **detail)
            elif entry.uid in over_ids:
                lore.over_book_budget.add(entry.uid)
                engine.exclude(candidate, "dropped", "over_budget", token_budget=budget,
                               **detail)
            elif activation.reason == "regex_unsupported":
                # Its own reason: a key RE2 refuses is not a key that did not occur.
                engine.exclude(candidate, "dropped", "regex_unsupported",
                               problem=_unsupported(entry), **detail)
            else:
                engine.exclude(candidate, "dropped",
                               "disabled" if activation.status == "disabled"
                               else "not_matched", **detail)
        for activation in kept:
            placed = Placed(activation.entry, candidates[activation.entry.uid])
            if not placed.candidate.text:
                continue
            lore.texts.append(activation.entry.content)
            if activation.entry.depth is not None:
                lore.depth.append(placed)
            elif activation.entry.position == "before_char":
                lore.before.append(placed)
            else:
                lore.after.append(placed)
    # Kept order within a place: insertion order across books, then book order.
    rank = {placed.entry.uid: index for index, placed in enumerate(lore.kept)}
    for place in (lore.before, lore.after):
        place.sort(key=lambda p: (p.entry.insertion_order, rank[p.entry.uid]))
    lore.depth.sort(key=lambda p: (-(p.entry.depth or 0), p.entry.insertion_order,
                                   rank[p.entry.uid]))
    return lore


def _unsupported(entry: Entry) -> str | None:
    """Why RE2 refuses the entry's first key it refuses (primary keys first)."""
    for key in (*entry.keys, *entry.secondary_keys):
        matcher = compile_key(key, case_sensitive=entry.case_sensitive, use_regex=True)
        if matcher.unsupported is not None:
            return matcher.problem
    return None


def _detail(book: Book, activation: Activation) -> dict[str, str | int | float | None]:
    entry = activation.entry
    by = _by(activation)
    detail: dict[str, str | int | float | None] = {
        "book": book.source, "entry": entry.label,
        "insertion_order": _number(entry.insertion_order), "priority": _number(entry.priority),
        "position": "depth" if entry.depth is not None else entry.position}
    if activation.status in ("activated", "constant"):
        detail["by"] = by
    elif activation.status == "not_matched":
        detail["match"] = activation.reason
    if activation.key is not None:
        detail["key"] = activation.key
    if activation.secondary_key is not None:
        detail["secondary_key"] = activation.secondary_key
    if activation.message_id is not None:
        detail["message_id"] = activation.message_id
    if activation.via is not None:
        detail["via"] = activation.via
    if entry.depth is not None:
        detail["depth"] = entry.depth
        detail["role"] = entry.role
    return detail


NOTE_ID = "depth_prompt"
"""The item id of the card's character note."""
NOTE_ROLES: tuple[Role, ...] = ("system", "user", "assistant")


def _character_note(engine: Engine, macros: Macros, card: Mapping[str, object],
                    section: str) -> AtDepth | None:
    """SillyTavern's character note: ``extensions.depth_prompt`` ``{prompt, depth,
    role}``, sent at its depth (4 and ``system`` by default, as SillyTavern does) when it
    has a prompt. Kept like a permanent field."""
    extensions = card.get("extensions")
    note = extensions.get(NOTE_ID) if isinstance(extensions, Mapping) else None
    if not isinstance(note, Mapping) or not isinstance(note.get("prompt"), str) \
            or not note["prompt"].strip():
        return None
    depth = note.get("depth")
    role = note.get("role")
    depth = depth if isinstance(depth, int) and not isinstance(depth, bool) \
        and depth >= 0 else 4
    chosen: Role = next((known for known in NOTE_ROLES if known == role), "system")
    candidate = engine.candidate(NOTE_ID, section, macros.apply(note["prompt"]))
    engine.include(candidate, "character_note", depth=depth, role=chosen)
    return AtDepth(candidate, depth, chosen)


def _number(value: float) -> int | float:
    """A whole number as an int (cards write ``100``, not ``100.0``)."""
    return int(value) if float(value).is_integer() else value


def lore_rows(lore: Lore, intern: Interner | None = None) -> list[LoreRow]:
    """One report row per entry, with its final status (the context's budget may have
    shed an activated one); with ``intern``, a row equal to an earlier assembly's is
    reused (500 entries are 500 rows every turn)."""
    placed = {item.candidate.id for item in lore.kept}
    rows = []
    for activation, candidate in lore.decided:
        entry = activation.entry
        status: LoreStatus
        if activation.status == "disabled":
            status = "disabled"
        elif activation.status not in ("activated", "constant"):
            status = "not_matched"
        elif candidate.id in placed:
            status = "activated"
        elif not candidate.text:
            status = "empty"
        elif candidate.id in lore.not_in_template:
            status = "not_in_template"
        else:
            status = "over_budget"
        fields = (entry.uid, entry.source, entry.label, candidate.tokens, status,
                  None if status != "activated" else _by(activation), activation.key,
                  activation.message_id,
                  f"depth {entry.depth}" if entry.depth is not None else entry.position)
        rows.append(_row(fields) if intern is None
                    else intern(("lore-row", *fields), partial(_row, fields)))
    return rows


def _by(activation: Activation) -> Literal["key", "constant", "recursion"]:
    return ("constant" if activation.reason == "constant"
            else "recursion" if activation.reason == "recursion" else "key")


def _row(fields: tuple[Any, ...]) -> LoreRow:
    uid, book, label, tokens, status, by, key, message_id, placement = fields
    return LoreRow(entry_id=uid, book=book, label=label, tokens=tokens, status=status,
                   by=by, key=key, message_id=message_id, placement=placement)
