"""In-process memos of assemblies: values a profile computed before, interned by content.

Why it is safe: every entry is keyed by everything it is a function of (a decision by its
whole content, a report row by its fields, a profile's per-item work by the item, the
policy and the context it read), so an assembly with a memo is byte for byte the one
without it; the memo only saves rebuilding, and re-serializing for the digest, what did
not change. It is never persisted and never enters a digest. The facade (``Ledger``) owns
one ``SessionMemos`` per open ledger and hands it to the engine; a timeline (and so
``why``) and an audit's fold keep one for their steps, as live turns do; a replay
assembles without one (cold), which is how warm and cold results are compared.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator, Sequence
from contextlib import contextmanager
from itertools import compress, count, islice
from operator import is_not
from typing import Any, TypeVar

from pydantic import BaseModel

from ctxledger.projections.session_view import ItemSet, MessageSet
from ctxledger.store.canonical import canonical_json

T = TypeVar("T")

_LISTS = 16
"""Lists whose last JSON ``json_list`` keeps (an assembly has a handful)."""
_RESYNC = 16
"""``json_list`` stops looking for runs of the last list's objects after ``_RESYNC`` plus
one in ``_RESYNC`` of the list's length changed ones: each look walks the list from its
place on, so a list that changed everywhere would otherwise cost the square of its
length."""

GENERATION_SLACK = 3
"""A memo generation is retired when it holds more than this many times the models one
assembly used."""


class CanonicalMemo:
    """Interned immutable values (by content) and models' canonical JSON (by identity).

    Two generations: the newer one holds what recent assemblies used (a hit in the older
    one is carried over). ``assembled`` (after each assembly) retires the newer
    generation to the older one, dropping the older, once it holds several times what
    that assembly used: memory stays bounded, and two databases with the same session id
    assembled in turn (a benchmark) do not evict each other's entries every time.
    Entries are immutable and content-addressed, so a race between threads costs a miss,
    never a wrong value.
    """

    def __init__(self) -> None:
        self._models: dict[Hashable, object] = {}
        self._old_models: dict[Hashable, object] = {}
        self._json: dict[int, tuple[BaseModel, str]] = {}
        self._old_json: dict[int, tuple[BaseModel, str]] = {}
        self._used = 0
        self._states: OrderedDict[Hashable, object] = OrderedDict()
        self._lists: dict[Hashable, tuple[list[BaseModel], list[str]]] = {}
        self._runs: dict[Hashable, object] = {}
        self.built = 0
        """Models built (interning misses) so far: a test checks reuse."""

    def intern(self, key: Hashable, build: Callable[[], T]) -> T:
        """The value interned under ``key`` (which must name everything it is a function
        of), or ``build()``'s, interned from now on. Values must be immutable."""
        self._used += 1
        found = self._models.get(key)
        if found is None:
            found = self._old_models.get(key)
            if found is None:
                found = build()
                self.built += 1
            self._models[key] = found
        return found  # type: ignore[return-value]

    def lookup(self, key: Hashable) -> object | None:
        """The value interned under ``key``, or None (nothing is built)."""
        self._used += 1
        found = self._models.get(key)
        if found is None:
            found = self._old_models.get(key)
            if found is not None:
                self._models[key] = found
        return found

    def remember(self, key: Hashable, value: object) -> None:
        """Intern ``value`` under ``key`` (an index to what ``intern`` built: not counted
        in ``built``)."""
        self._models[key] = value

    def derived(self, source: object, tag: Hashable, build: Callable[[], T]) -> T:
        """What ``build()`` derives from the immutable object ``source`` (and from what
        ``tag`` names), kept for that very object: a read view that hands the same object
        again (``MessageSet``) gets the value without deriving it again."""
        self._used += 1
        key = ("derived", id(source), tag)
        found = self._models.get(key)
        if found is None or found[0] is not source:  # type: ignore[index]
            found = self._old_models.get(key)
            if found is None or found[0] is not source:  # type: ignore[index]
                # The entry holds the object, so its id cannot name another meanwhile.
                found = (source, build())
                self.built += 1
            self._models[key] = found
        return found[1]  # type: ignore[index,no-any-return]

    def derived_before(self, source: object, tag: Hashable) -> Any:
        """What ``derived`` or ``keep_derived`` kept for ``source`` under ``tag``, or
        None (nothing is built)."""
        self._used += 1
        key = ("derived", id(source), tag)
        found = self._models.get(key)
        if found is None or found[0] is not source:  # type: ignore[index]
            found = self._old_models.get(key)
            if found is None or found[0] is not source:  # type: ignore[index]
                return None
            self._models[key] = found
        return found[1]  # type: ignore[index]

    def keep_derived(self, source: object, tag: Hashable, value: object) -> None:
        """Keep ``value``, derived from the immutable ``source``, for ``derived``."""
        self._models[("derived", id(source), tag)] = (source, value)
        self.built += 1

    def json_list(self, name: Hashable, models: Sequence[BaseModel]) -> str:
        """The canonical JSON of the list ``models`` (each as ``json_of``), where ``name``
        says which list of an assembly it is: runs of it that are the very same objects,
        in the same places, as in the last list of that name are not joined again (a
        long history's decisions and messages are the same objects every assembly; a
        few changed ones, the card fields' say, break a run and it resumes after them)."""
        found = self._lists.get(name)
        before, before_parts = found if found is not None else ([], [])
        json_of = self.json_of
        parts: list[str] = []
        size, known = len(models), min(len(models), len(before))
        index = misses = 0
        most = _RESYNC + size // _RESYNC
        while index < size:
            if index < known and misses < most:
                # A C-level walk: how many objects from here on are the same ones.
                run = next(compress(count(), map(is_not, islice(models, index, None),
                                                 islice(before, index, None))),
                           known - index)
                if run:
                    parts.extend(before_parts[index:index + run])
                    index += run
                    continue
                misses += 1
                parts.append(json_of(models[index]))
                index += 1
                continue
            # Past the last list, or out of step with it: each model's own JSON.
            parts.extend(json_of(model) for model in islice(models, index, None))
            break
        if len(self._lists) >= _LISTS and name not in self._lists:
            self._lists.clear()
        self._lists[name] = (list(models), parts)
        return "[" + ",".join(parts) + "]"

    def last_run(self, name: Hashable) -> object | None:
        """What ``keep_run`` kept under ``name`` (the last assembly's), or None."""
        return self._runs.get(name)

    def keep_run(self, name: Hashable, run: object) -> None:
        """Keep an assembly's per-item results under ``name`` (which says which list of
        an assembly it is, like ``json_list``'s) for the next one to reuse what matches:
        the caller compares the items themselves, so a stale run costs a miss only."""
        if len(self._runs) >= _LISTS and name not in self._runs:
            self._runs.clear()
        self._runs[name] = run

    def json_of(self, model: BaseModel) -> str:
        """``canonical_json(model.model_dump(mode="json"))``, from the memo when known."""
        slot = id(model)
        found = self._json.get(slot)
        if found is None or found[0] is not model:
            found = self._old_json.get(slot)
            if found is None or found[0] is not model:
                # A JSON-native model's fields are already its JSON values: no dump.
                data = (model.__dict__ if getattr(model, "json_native", False)
                        else model.model_dump(mode="json"))
                found = (model, canonical_json(data))
            self._json[slot] = found
        return found[1]

    def state(self, key: Hashable) -> object | None:
        """A profile's state kept under ``key`` (``keep_state``), or None."""
        return self._states.get(key)

    def keep_state(self, key: Hashable, state: object, capacity: int) -> None:
        """Keep a profile's mutable state across assemblies (the latest ``capacity``
        keys): it must name everything the state is a function of besides the view."""
        self._states[key] = state
        self._states.move_to_end(key)
        while len(self._states) > capacity:
            self._states.popitem(last=False)

    def forget_state(self, key: Hashable) -> None:
        """Drop the state under ``key`` (one that failed half-way)."""
        self._states.pop(key, None)

    def assembled(self) -> None:
        """End of an assembly: retire the newer generation once it is over
        ``GENERATION_SLACK`` times what this assembly used."""
        used, self._used = self._used, 0
        if len(self._models) > GENERATION_SLACK * used:
            self._old_models, self._models = self._models, {}
            self._old_json, self._json = self._json, {}


SESSIONS = 8
"""Sessions whose memos are kept."""


class SessionMemos:
    """A ``CanonicalMemo`` per session id, at most ``capacity`` of them (LRU).

    Shared by threads: each assembly takes its session's memos with ``lease``, so no
    two threads use one session's memo (a profile's kept state is mutable) at once."""

    def __init__(self, capacity: int = SESSIONS) -> None:
        self.capacity = capacity
        self._memos: OrderedDict[str, CanonicalMemo] = OrderedDict()
        self._item_sets: dict[str, ItemSet] = {}
        self._message_sets: dict[str, MessageSet] = {}
        self._lock = threading.Lock()
        self._leased: set[str] = set()

    @contextmanager
    def lease(self, stream_id: str) -> Iterator[SessionMemos]:
        """These memos for one assembly of ``stream_id``; while another thread holds
        that session's, a fresh ``SessionMemos`` of its own instead (a cold assembly:
        the same result, nothing shared)."""
        with self._lock:
            taken = stream_id in self._leased
            self._leased.add(stream_id)
        if taken:
            yield SessionMemos(capacity=1)
            return
        try:
            yield self
        finally:
            with self._lock:
                self._leased.discard(stream_id)

    def for_session(self, stream_id: str) -> CanonicalMemo:
        """The memo of ``stream_id`` (a new one the first time)."""
        with self._lock:
            memo = self._memos.get(stream_id)
            if memo is None:
                memo = self._memos[stream_id] = CanonicalMemo()
            self._memos.move_to_end(stream_id)
            while len(self._memos) > self.capacity:
                gone, _ = self._memos.popitem(last=False)
                self._item_sets.pop(gone, None)
                self._message_sets.pop(gone, None)
            return memo

    def item_set(self, stream_id: str) -> ItemSet | None:
        """The item set kept for ``stream_id`` (``ViewRequest.items_probe``)."""
        with self._lock:
            return self._item_sets.get(stream_id)

    def keep_item_set(self, item_set: ItemSet) -> None:
        """Keep ``item_set`` for its session's next read view (one per session, for
        the sessions that have a memo)."""
        with self._lock:
            if item_set.stream_id in self._memos:
                self._item_sets[item_set.stream_id] = item_set

    def message_set(self, stream_id: str) -> MessageSet | None:
        """The whole history kept for ``stream_id`` (``ViewRequest.history_probe``)."""
        with self._lock:
            return self._message_sets.get(stream_id)

    def keep_message_set(self, message_set: MessageSet) -> None:
        """Keep ``message_set`` for its session's next read view (one per session, for
        the sessions that have a memo)."""
        with self._lock:
            if message_set.stream_id in self._memos:
                self._message_sets[message_set.stream_id] = message_set

    def clear(self) -> None:
        """Forget every memo (tests: a cold assembly in the same process)."""
        with self._lock:
            self._memos.clear()
            self._item_sets.clear()
            self._message_sets.clear()
