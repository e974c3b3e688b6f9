"""Which lorebook entries activate for a chat, and which of them fit the book's budget.

An entry activates when one of its keys occurs in the scan window (the last
``scan_depth`` messages), a ``selective`` one only when one of its secondary keys occurs
there too; ``constant`` entries are always active, disabled ones never. With recursive
scanning the content of active entries is scanned for the others' keys as well, until
nothing new activates.

Incremental: each text (a message's, an entry's content) is scanned once per book, by
content, through ``intern`` (``CanonicalMemo.intern``): after one new message only that
message is scanned, and a message leaving the window simply stops counting. Results are
the same with and without the memo.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from ctxledger.assembler.lorebook.book import Book, Entry, Interner
from ctxledger.assembler.lorebook.matching import Matcher, compile_key, encode_text

Status = Literal["activated", "constant", "not_matched", "disabled"]
ACTIVE: tuple[Status, ...] = ("activated", "constant")
"""The statuses of entries that go into the prompt (budget permitting)."""


@dataclass(frozen=True, slots=True)
class ScanMessage:
    """A message of the chat as the lorebook scans it."""

    message_id: str
    text: str
    """What is scanned: the message's text content."""


@dataclass(frozen=True, slots=True)
class Activation:
    """What became of one entry, and why."""

    entry: Entry
    status: Status
    reason: str
    """constant | key_matched | recursion | no_key_matched | secondary_key_missing |
    disabled | dont_activate | invalid_regex | regex_unsupported (no key matched and
    one of them is a pattern RE2 refuses)"""
    key: str | None = None
    """The primary key that matched (as written)."""
    secondary_key: str | None = None
    message_id: str | None = None
    """The newest message in the window where the key matched."""
    via: str | None = None
    """Recursion: the uid of the entry whose content matched."""


@dataclass(frozen=True, slots=True)
class _Plan:
    """A book's keys ready to scan: each distinct key once, and who uses it."""

    folded: tuple[tuple[int, str], ...]
    """(matcher id, casefolded needle) of the case-insensitive plain keys."""
    exact: tuple[tuple[int, str], ...]
    regexes: tuple[tuple[int, Matcher], ...]
    matchers: tuple[Matcher, ...]
    primary: tuple[tuple[int, ...], ...]
    """Per entry, its keys' matcher ids in key order (none for an entry no key can
    activate: disabled, never, constant)."""
    secondary: tuple[tuple[int, ...], ...]
    """Per entry, its secondary keys' matcher ids (only a selective entry's)."""
    primary_users: Mapping[int, tuple[tuple[int, int], ...]]
    """Matcher id -> (entry index, key position) of the primary keys it serves."""
    secondary_users: Mapping[int, tuple[tuple[int, int], ...]]


@dataclass(frozen=True, slots=True)
class _Hits:
    """The keys (matcher ids) found in one text."""

    matched: frozenset[int]


def _plan(book: Book) -> _Plan:
    ids: dict[tuple[str, bool, bool], int] = {}
    matchers: list[Matcher] = []

    def matcher_ids(entry: Entry, keys: Sequence[str]) -> tuple[int, ...]:
        out = []
        for key in keys:
            slot = (key, entry.case_sensitive, entry.use_regex)
            found = ids.get(slot)
            if found is None:
                found = ids[slot] = len(matchers)
                matchers.append(compile_key(key, case_sensitive=entry.case_sensitive,
                                            use_regex=entry.use_regex))
            out.append(found)
        return tuple(out)

    primary: list[tuple[int, ...]] = []
    secondary: list[tuple[int, ...]] = []
    for entry in book.entries:
        keyed = entry.enabled and not entry.never and not entry.constant
        primary.append(matcher_ids(entry, entry.keys) if keyed else ())
        secondary.append(matcher_ids(entry, entry.secondary_keys)
                         if keyed and entry.selective else ())
    return _Plan(
        folded=tuple((i, m.needle) for i, m in enumerate(matchers)
                     if m.needle is not None and not m.case_sensitive),
        exact=tuple((i, m.needle) for i, m in enumerate(matchers)
                    if m.needle is not None and m.case_sensitive),
        regexes=tuple((i, m) for i, m in enumerate(matchers) if m.pattern is not None),
        matchers=tuple(matchers), primary=tuple(primary), secondary=tuple(secondary),
        primary_users=_users(primary), secondary_users=_users(secondary))


def _users(per_entry: Sequence[tuple[int, ...]]) -> dict[int, tuple[tuple[int, int], ...]]:
    users: dict[int, list[tuple[int, int]]] = {}
    for index, matcher_ids in enumerate(per_entry):
        for position, matcher in enumerate(matcher_ids):
            users.setdefault(matcher, []).append((index, position))
    return {matcher: tuple(found) for matcher, found in users.items()}


def _scan(plan: _Plan, text: str) -> _Hits:
    folded = text.casefold() if plan.folded else text
    matched = [i for i, needle in plan.folded if needle in folded]
    matched += [i for i, needle in plan.exact if needle in text]
    if plan.regexes:
        encoded = encode_text(text)
        matched += [i for i, matcher in plan.regexes if matcher.search(text, folded, encoded)]
    return _Hits(frozenset(matched))


class _Scanner:
    """Scans texts against one book's plan, through the memo when there is one."""

    def __init__(self, book: Book, intern: Interner | None) -> None:
        self.digest = book.digest
        self.intern = intern
        self.plan = (_plan(book) if intern is None
                     else intern(("lore-plan", book.digest), lambda: _plan(book)))

    def baseline(self, book: Book) -> tuple[Activation, ...]:
        """Each entry's activation when no key of the book occurs anywhere."""
        def build() -> tuple[Activation, ...]:
            return tuple(_window_activation(entry, self.plan, None, None, ())
                         for entry in book.entries)

        if self.intern is None:
            return build()
        return self.intern(("lore-baseline", book.source, book.digest), build)

    def hits(self, text: str) -> _Hits:
        if self.intern is None:
            return _scan(self.plan, text)
        return self.intern(("lore-scan", self.digest, text), lambda: _scan(self.plan, text))


@dataclass(slots=True)
class _Found:
    """The first match of an entry's keys: where (a message or a source entry) and
    which key (its position in the entry's keys)."""

    where: int
    position: int


def activate(book: Book, messages: Sequence[ScanMessage], *, scan_depth: int,
             recursive: bool | None = None,
             intern: Interner | None = None) -> tuple[Activation, ...]:
    """One Activation per entry, in the book's entry order. Scans the last ``scan_depth``
    of ``messages`` (oldest first as given). ``recursive`` None -> the book's
    ``recursive_scanning``. ``intern`` (``CanonicalMemo.intern``) keeps each text's scan
    by content, so a re-assembly scans only what is new."""
    if scan_depth < 0:
        raise ValueError(f"scan_depth must be >= 0, not {scan_depth}")
    scanner = _Scanner(book, intern)
    plan = scanner.plan
    window = messages[max(0, len(messages) - scan_depth):] if scan_depth else ()
    # Newest first: the first message where an entry's key occurs is the newest one.
    newest_first = [scanner.hits(message.text) for message in reversed(window)]
    primary = _first_matches(newest_first, plan.primary_users)
    secondary = _first_matches(newest_first, plan.secondary_users)
    # Most entries match nothing: their activation is the book's baseline, built once.
    out = list(scanner.baseline(book))
    for index in sorted(primary):
        out[index] = _window_activation(book.entries[index], plan, primary.get(index),
                                        secondary.get(index), window)
    if recursive if recursive is not None else book.recursive_scanning:
        _recurse(book, scanner, out, secondary)
    return tuple(out)


def _first_matches(texts: Sequence[_Hits], users: Mapping[int, tuple[tuple[int, int], ...]]
                   ) -> dict[int, _Found]:
    """Entry index -> the first text (in the order given) where one of its keys occurs,
    with the earliest such key of the entry in that text."""
    found: dict[int, _Found] = {}
    for where, hits in enumerate(texts):
        for matcher in hits.matched:
            for index, position in users.get(matcher, ()):
                seen = found.get(index)
                if seen is None:
                    found[index] = _Found(where, position)
                elif seen.where == where and position < seen.position:
                    seen.position = position
    return found


def _window_activation(entry: Entry, plan: _Plan, primary: _Found | None,
                       secondary: _Found | None, window: Sequence[ScanMessage]
                       ) -> Activation:
    if not entry.enabled:
        return Activation(entry, "disabled", "disabled")
    if entry.never:
        return Activation(entry, "disabled", "dont_activate")
    if entry.constant:
        return Activation(entry, "constant", "constant")
    if primary is None:
        return Activation(entry, "not_matched", _missing(plan, plan.primary[entry.index],
                                                         "no_key_matched"))
    key = entry.keys[primary.position]
    message_id = window[len(window) - 1 - primary.where].message_id
    if plan.secondary[entry.index] and secondary is None:
        return Activation(entry, "not_matched",
                          _missing(plan, plan.secondary[entry.index],
                                   "secondary_key_missing"),
                          key=key, message_id=message_id)
    second = None if secondary is None else entry.secondary_keys[secondary.position]
    return Activation(entry, "activated", "key_matched", key=key, secondary_key=second,
                      message_id=message_id)


def _missing(plan: _Plan, matcher_ids: tuple[int, ...], reason: str) -> str:
    """``reason``, or why one of the keys could not be searched: regex_unsupported (RE2
    refuses a pattern JavaScript reads) before invalid_regex."""
    keys = [plan.matchers[i] for i in matcher_ids]
    if any(matcher.unsupported is not None for matcher in keys):
        return "regex_unsupported"
    return "invalid_regex" if any(matcher.error is not None for matcher in keys) else reason


def _recurse(book: Book, scanner: _Scanner, out: list[Activation],
             window_secondary: Mapping[int, _Found]) -> None:
    """Activate, in rounds, the entries whose keys occur in active entries' content."""
    plan, entries = scanner.plan, book.entries
    candidates = [entry.index for entry in entries
                  if out[entry.index].status == "not_matched" and not entry.exclude_recursion
                  and plan.primary[entry.index]]
    # Entry index -> first source (entry order) whose content has one of its keys.
    via: dict[int, _Found] = {}
    secondary_in_content: dict[int, _Found] = {}
    fresh = [entry.index for entry in entries if out[entry.index].status in ACTIVE]
    for _ in range(len(entries)):
        sources = [index for index in fresh if not entries[index].prevent_recursion]
        for source in sources:
            hits = scanner.hits(entries[source].content)
            _merge(via, hits, plan.primary_users, source)
            _merge(secondary_in_content, hits, plan.secondary_users, source)
        fresh = []
        for index in candidates:
            if out[index].status != "not_matched" or index not in via:
                continue
            entry = entries[index]
            second = window_secondary.get(index) or secondary_in_content.get(index)
            if plan.secondary[index] and second is None:
                continue
            found = via[index]
            out[index] = Activation(
                entry, "activated", "recursion", key=entry.keys[found.position],
                secondary_key=None if second is None else entry.secondary_keys[
                    second.position],
                via=entries[found.where].uid)
            fresh.append(index)
        if not fresh:
            break


def _merge(found: dict[int, _Found], hits: _Hits,
           users: Mapping[int, tuple[tuple[int, int], ...]], source: int) -> None:
    """Record ``source`` (an entry index) where an entry's key occurs: the first source in
    entry order wins, then the earliest key."""
    for matcher in hits.matched:
        for index, position in users.get(matcher, ()):
            seen = found.get(index)
            if seen is None or (source, position) < (seen.where, seen.position):
                found[index] = _Found(source, position)


def fit_budget(active: Sequence[Activation], tokens: Mapping[str, int],
               budget: int | None) -> tuple[tuple[Activation, ...], tuple[Activation, ...]]:
    """(kept, over_budget) of ``active`` (activated and constant entries), ``tokens``
    giving each entry's size by uid. Kept in prompt order: insertion_order ascending,
    then book order. Over the budget the lowest priority is dropped first (ties: the
    larger insertion_order, then the later entry) until the rest fit; an entry bigger
    than the budget alone is dropped. ``budget`` None keeps all."""
    def prompt_order(activation: Activation) -> tuple[float, int, str, str]:
        entry = activation.entry
        return (entry.insertion_order, entry.index, entry.source, entry.uid)

    def drop_order(activation: Activation) -> tuple[float, float, int, str, str]:
        entry = activation.entry
        return (entry.priority, -entry.insertion_order, -entry.index, entry.source,
                entry.uid)

    ordered = sorted(active, key=prompt_order)
    if budget is None:
        return tuple(ordered), ()
    size = {activation.entry.uid: _tokens(tokens, activation) for activation in ordered}
    dropped = {uid for uid, count in size.items() if count > budget}
    total = sum(count for uid, count in size.items() if uid not in dropped)
    for activation in sorted(ordered, key=drop_order):
        if total <= budget:
            break
        uid = activation.entry.uid
        if uid not in dropped:
            dropped.add(uid)
            total -= size[uid]
    return (tuple(a for a in ordered if a.entry.uid not in dropped),
            tuple(a for a in ordered if a.entry.uid in dropped))


def _tokens(tokens: Mapping[str, int], activation: Activation) -> int:
    try:
        return tokens[activation.entry.uid]
    except KeyError:
        raise KeyError(f"no token count for lorebook entry {activation.entry.uid}") from None
