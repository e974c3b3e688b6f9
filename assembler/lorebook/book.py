"""A lorebook as written (a V2 ``character_book``, a V3 book or ``lorebook_v3`` file) read
into frozen entries: what the activation engine and the card profile need, nothing lost
that they read.

Where the specs are silent this follows SillyTavern: a missing ``priority`` is the
entry's ``insertion_order``; SillyTavern's ``extensions`` (``position`` 4 = at a depth,
``depth``, ``role``, ``exclude_recursion``, ``prevent_recursion``) are honoured. V3
decorators (``@@depth 4`` lines at the start of ``content``) are read and removed from
the content.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal, Protocol, TypeVar

from ctxledger.assembler.lorebook.matching import compile_key
from ctxledger.store.canonical import canonical_json, sha256_hex
from ctxledger.store.character_card import lorebook_data

T = TypeVar("T")

Position = Literal["before_char", "after_char"]
Role = Literal["system", "user", "assistant"]

ROLES: Final[tuple[Role, ...]] = ("system", "user", "assistant")
"""SillyTavern's ``extensions.role`` numbers: 0 system, 1 user, 2 assistant."""
ST_AT_DEPTH: Final = 4
"""SillyTavern's ``extensions.position`` for an entry inserted at a depth in the chat."""
ST_DEFAULT_DEPTH: Final = 4
"""SillyTavern's depth when an at-depth entry gives none."""
_ROLE_NAMES: Final[dict[str, Role]] = {role: role for role in ROLES}
DEFAULT_INSERTION_ORDER: Final = 100
"""SillyTavern's default order (``store.character_card.LorebookEntry``'s default)."""


class Interner(Protocol):
    """``CanonicalMemo.intern``: the value kept under a key naming everything it is a
    function of, or ``build()``'s, kept from now on."""

    def __call__(self, key: Hashable, build: Callable[[], T], /) -> T:
        """The value under ``key``, built once."""
        ...


@dataclass(frozen=True, slots=True)
class Entry:
    """One lorebook entry, as the engine reads it."""

    uid: str
    """``lore:{source}:{id}`` (the entry's ``id`` when unique in the book, else
    ``#{index}``): unique within the book."""
    source: str
    """The book's source: ``card`` or a scope book's name for the lead's tables."""
    index: int
    """Position in the book's ``entries``."""
    label: str
    """For tables: the name, else the comment, else the first key, else ``#{index}``."""
    keys: tuple[str, ...]
    secondary_keys: tuple[str, ...]
    content: str
    """The content without its leading V3 decorator lines."""
    enabled: bool
    constant: bool
    """``constant``, or a ``@@activate`` decorator."""
    never: bool
    """A ``@@dont_activate`` decorator: never activates."""
    selective: bool
    case_sensitive: bool
    use_regex: bool
    insertion_order: float
    priority: float
    """The written priority, else the insertion order (as SillyTavern)."""
    position: Position
    depth: int | None
    """``@@depth N``, else SillyTavern's at-depth position, else None."""
    role: Role | None
    """The role of an entry at a depth (``@@role``, else SillyTavern's ``role``, else
    system); None when ``depth`` is None."""
    problems: tuple[str, ...]
    """What could not be read: an invalid regex key or one RE2 refuses, a bad decorator
    value."""
    exclude_recursion: bool = False
    """SillyTavern: another entry's content cannot activate this one."""
    prevent_recursion: bool = False
    """SillyTavern: this entry's content never activates others."""


@dataclass(frozen=True, slots=True)
class Book:
    """A parsed lorebook."""

    source: str
    name: str | None
    scan_depth: int | None
    token_budget: int | None
    recursive_scanning: bool
    entries: tuple[Entry, ...]
    digest: str
    """SHA-256 (hex) of the book's canonical JSON: names it in memo keys."""

    @property
    def regex_keys(self) -> bool:
        """Whether an entry has a regex key that is not blank (whose reading changed
        with the regex engine: ``assembler.model.REGEX_KEYS_FORMAT``, 6)."""
        return any(entry.use_regex and any(key.strip() for key in (
            *entry.keys, *entry.secondary_keys)) for entry in self.entries)

    def warnings(self) -> list[str]:
        """One line per problem of an entry, naming the book and the entry: what an
        import reports (a regex key RE2 refuses, an invalid one, a bad decorator)."""
        return [f"lorebook {self.source!r} entry {entry.label!r}: {problem}"
                for entry in self.entries for problem in entry.problems]


class LorebookWarning(UserWarning):
    """An imported lorebook entry that cannot work as written (a regex key RE2 refuses,
    an invalid one, a bad decorator): the import goes ahead, the line names it."""


def book_warnings(source: str, raw: Any) -> list[str]:
    """``Book.warnings`` of the book ``raw`` as written (none when it is no object):
    what importing it reports, before any assembly."""
    if not isinstance(raw, Mapping):
        return []
    return parse_book(source, raw).warnings()


def parse_book(source: str, raw: Mapping[str, Any], *,
               intern: Interner | None = None) -> Book:
    """Read the book ``raw`` (as written: a ``character_book``, or a ``lorebook_v3``
    file) from ``source``. With ``intern`` (``CanonicalMemo.intern``) a book already read
    is reused: only its canonical JSON is computed again."""
    digest = sha256_hex(canonical_json(_plain(raw)))
    if intern is None:
        return _parse(source, raw, digest)
    return intern(("lore-book", source, digest), lambda: _parse(source, raw, digest))


def _plain(raw: Mapping[str, Any]) -> Any:
    return raw if isinstance(raw, dict) else dict(raw)


def _parse(source: str, raw: Mapping[str, Any], digest: str) -> Book:
    data = lorebook_data(raw)
    written = data.get("entries")
    items: Sequence[Any] = written if isinstance(written, list) else ()
    keys = _entry_keys(items)
    entries = tuple(_entry(source, index, item if isinstance(item, Mapping) else {},
                           keys[index]) for index, item in enumerate(items))
    return Book(source=source, name=_text(data.get("name")),
                scan_depth=_count(data.get("scan_depth")),
                token_budget=_count(data.get("token_budget")),
                recursive_scanning=data.get("recursive_scanning") is True,
                entries=entries, digest=digest)


def _entry_keys(items: Sequence[Any]) -> list[str]:
    """Each entry's key in its uid: its ``id`` when no other entry has the same one (and
    no other entry's fallback ``#{index}`` is that text), else ``#{index}``."""
    ids = [str(item["id"]) if isinstance(item, Mapping) and isinstance(
        item.get("id"), int | str) and not isinstance(item.get("id"), bool) else None
        for item in items]
    counts: dict[str, int] = {}
    for written in ids:
        if written is not None:
            counts[written] = counts.get(written, 0) + 1
    keys = [written if written is not None and counts[written] == 1 else f"#{index}"
            for index, written in enumerate(ids)]
    # A fallback can equal another entry's id ("#3"): that id falls back too, until the
    # keys are unique (each round turns at least one id into its unique fallback).
    for _ in range(len(keys) + 1):
        taken: dict[str, int] = {}
        for key in keys:
            taken[key] = taken.get(key, 0) + 1
        clashes = [index for index, key in enumerate(keys)
                   if taken[key] > 1 and key != f"#{index}"]
        if not clashes:
            break
        for index in clashes:
            keys[index] = f"#{index}"
    return keys


_DECORATOR = re.compile(r"@@(\w+)[ \t]*(.*)")


def _entry(source: str, index: int, item: Mapping[str, Any], key: str) -> Entry:
    problems: list[str] = []
    content, decorators = _decorators(_text(item.get("content")) or "", problems)
    extensions = item.get("extensions")
    ext: Mapping[str, Any] = extensions if isinstance(extensions, Mapping) else {}
    keys = _strings(item.get("keys"))
    secondary = _strings(item.get("secondary_keys"))
    case_sensitive = item.get("case_sensitive") is True
    use_regex = item.get("use_regex") is True
    if use_regex:
        for written in dict.fromkeys((*keys, *secondary)):
            problem = compile_key(written, case_sensitive=case_sensitive,
                                  use_regex=True).problem
            if problem is not None:
                problems.append(problem)
    insertion_order = _number(item.get("insertion_order"), DEFAULT_INSERTION_ORDER)
    depth, role = _placement(decorators, ext, problems)
    return Entry(
        uid=f"lore:{source}:{key}", source=source, index=index,
        label=_label(item, keys, index), keys=keys, secondary_keys=secondary,
        content=content, enabled=item.get("enabled") is not False,
        constant=item.get("constant") is True or "activate" in decorators,
        never="dont_activate" in decorators, selective=item.get("selective") is True,
        case_sensitive=case_sensitive, use_regex=use_regex,
        insertion_order=insertion_order,
        priority=_number(item.get("priority"), insertion_order),
        position="before_char" if item.get("position") == "before_char" else "after_char",
        depth=depth, role=role, problems=tuple(problems),
        exclude_recursion=ext.get("exclude_recursion") is True,
        prevent_recursion=ext.get("prevent_recursion") is True)


def _decorators(content: str, problems: list[str]) -> tuple[str, dict[str, str]]:
    """The content without its leading decorator lines, and the decorators read (name ->
    argument; the first of a name wins). ``@@@`` fallback lines are dropped unread."""
    lines = content.split("\n")
    found: dict[str, str] = {}
    taken = 0
    for line in lines:
        text = line.strip()
        if not text.startswith("@@"):
            break
        taken += 1
        if text.startswith("@@@"):
            continue
        match = _DECORATOR.fullmatch(text)
        if match is None:
            problems.append(f"unreadable decorator {text!r}")
            continue
        found.setdefault(match.group(1), match.group(2).strip())
    if not taken:
        return content, found
    return "\n".join(lines[taken:]), found


def _placement(decorators: Mapping[str, str], ext: Mapping[str, Any],
               problems: list[str]) -> tuple[int | None, Role | None]:
    depth: int | None = None
    role: Role | None = None
    if "depth" in decorators:
        written = decorators["depth"]
        if written.isascii() and written.isdigit():
            depth = int(written)
        else:
            problems.append(f"@@depth {written!r} is not a whole number >= 0")
    elif ext.get("position") == ST_AT_DEPTH:
        depth = _count(ext.get("depth"))
        if depth is None:
            depth = ST_DEFAULT_DEPTH
    if "role" in decorators:
        written = decorators["role"]
        role = _ROLE_NAMES.get(written)
        if role is None:
            problems.append(f"@@role {written!r} is not one of {', '.join(ROLES)}")
    number = ext.get("role")
    if role is None and isinstance(number, int) and not isinstance(number, bool) \
            and 0 <= number < len(ROLES):
        role = ROLES[number]
    if depth is None:
        return None, None
    return depth, role or "system"


def _label(item: Mapping[str, Any], keys: tuple[str, ...], index: int) -> str:
    for candidate in (_text(item.get("name")), _text(item.get("comment")),
                      *keys[:1]):
        if candidate is not None and candidate.strip():
            return candidate
    return f"#{index}"


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _strings(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list):
        return ()
    return tuple(item for item in value if isinstance(item, str))


def _number(value: Any, default: float) -> float:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return float(default)


def _count(value: Any) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return None
