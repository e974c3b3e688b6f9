"""The lorebook engine (``assembler.lorebook``), pure: no database.

- Parsing: uids unique even with duplicate ids, labels, priority defaults, V3 decorators
  (read and stripped), SillyTavern's at-depth extensions.
- Matching: case-insensitive and case-sensitive substrings, regex keys (JS literals with
  flags, bare patterns, invalid ones, ones RE2 refuses, catastrophic ones in linear
  time).
- Activation: constant, disabled (beats constant), dont_activate, selective, the scan
  window, the newest matching message, recursion with exclude/prevent.
- The budget: prompt order, priority order with its ties, an oversize entry.
- The memo: after one new message only that message is scanned; results are the same
  with and without it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Hashable, Sequence
from typing import Any, TypeVar

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxledger.assembler.lorebook import (
    Activation,
    Book,
    ScanMessage,
    activate,
    compile_key,
    fit_budget,
    parse_book,
)
from ctxledger.assembler.memo import CanonicalMemo

T = TypeVar("T")


def book(*entries: dict[str, Any], **more: Any) -> Book:
    items = [{"content": f"content {i}", **entry} for i, entry in enumerate(entries)]
    return parse_book("card", {"entries": items, **more})


def chat(*texts: str) -> list[ScanMessage]:
    return [ScanMessage(f"m{i}", text) for i, text in enumerate(texts)]


def run(b: Book, *texts: str, depth: int = 10, **kw: Any) -> tuple[Activation, ...]:
    return activate(b, chat(*texts), scan_depth=depth, **kw)


def statuses(activations: Sequence[Activation]) -> list[tuple[str, str]]:
    return [(a.status, a.reason) for a in activations]


# Parsing


def test_uids_are_unique_with_duplicate_and_clashing_ids() -> None:
    b = book({"id": 7}, {"id": 7}, {"id": "x"}, {}, {"id": "#3"}, {"id": "#1"})
    uids = [e.uid for e in b.entries]
    assert len(set(uids)) == len(uids)
    assert uids[0] == "lore:card:#0" and uids[1] == "lore:card:#1"
    assert uids[2] == "lore:card:x"
    assert uids[3] == "lore:card:#3"
    # "#3" is entry 3's fallback, "#1" entry 1's: both fall back to their own index.
    assert uids[4] == "lore:card:#4" and uids[5] == "lore:card:#5"
    assert book({"id": 0}, {"id": 1}).entries[1].uid == "lore:card:1"


def test_labels_priority_position_defaults() -> None:
    b = book({"name": "Alpha", "comment": "c", "keys": ["k"]}, {"comment": "Beta", "keys": ["k"]},
             {"keys": ["gamma", "g"]}, {"keys": [" "]},
             {"insertion_order": 7, "position": "before_char"},
             {"insertion_order": 7, "priority": 2, "position": "weird"})
    assert [e.label for e in b.entries] == ["Alpha", "Beta", "gamma", "#3", "#4", "#5"]
    assert b.entries[0].insertion_order == 100 and b.entries[0].priority == 100
    assert b.entries[4].priority == 7 and b.entries[5].priority == 2
    assert b.entries[4].position == "before_char"
    assert b.entries[5].position == "after_char" and b.entries[0].position == "after_char"


def test_book_fields_and_digest() -> None:
    raw = {"name": "World", "scan_depth": 3, "token_budget": 50, "recursive_scanning": True,
           "entries": [{"keys": ["a"], "content": "x"}]}
    b = parse_book("world", raw)
    assert (b.source, b.name, b.scan_depth, b.token_budget, b.recursive_scanning) == (
        "world", "World", 3, 50, True)
    assert len(b.digest) == 64
    assert parse_book("world", dict(reversed(list(raw.items())))).digest == b.digest
    assert parse_book("world", {**raw, "name": "Other"}).digest != b.digest
    v3 = parse_book("world", {"spec": "lorebook_v3", "data": raw})
    assert v3.entries[0].keys == ("a",) and v3.name == "World"


def test_parse_book_memo_reuses_the_book() -> None:
    memo = CanonicalMemo()
    raw = {"entries": [{"keys": ["a"], "content": "x"}]}
    first = parse_book("card", raw, intern=memo.intern)
    again = parse_book("card", {"entries": [{"keys": ["a"], "content": "x"}]},
                       intern=memo.intern)
    assert again is first
    assert parse_book("world", raw, intern=memo.intern).source == "world"


def test_decorators_are_read_and_stripped() -> None:
    b = book({"content": "@@depth 2\n@@role assistant\n@@@fallback\n@@unknown x\nBody\n@@not"},
             {"content": "@@activate\nAlways"},
             {"content": "@@dont_activate\n@@activate\nNever", "keys": ["k"]},
             {"content": "@@depth deep\n@@role narrator\nText"},
             {"content": "no decorator\n@@depth 3"},
             {"content": "@@role user\nno depth"})
    e = b.entries
    assert (e[0].depth, e[0].role, e[0].content) == (2, "assistant", "Body\n@@not")
    assert e[1].constant and e[1].content == "Always"
    assert e[2].never and e[2].content == "Never"
    assert e[3].depth is None and e[3].content == "Text" and len(e[3].problems) == 2
    assert (e[4].depth, e[4].content) == (None, "no decorator\n@@depth 3")
    assert (e[5].depth, e[5].role) == (None, None)
    assert e[0].problems == ()


def test_sillytavern_depth_extensions() -> None:
    b = book({"extensions": {"position": 4, "depth": 6, "role": 2}},
             {"extensions": {"position": 4, "depth": 1}},
             {"extensions": {"position": 4}},
             {"extensions": {"position": 1, "depth": 6, "role": 1}},
             {"content": "@@depth 0\n@@role user\nx", "extensions": {"position": 4, "depth": 9,
                                                                   "role": 2}})
    e = b.entries
    assert (e[0].depth, e[0].role) == (6, "assistant")
    assert (e[1].depth, e[1].role) == (1, "system")
    assert (e[2].depth, e[2].role) == (4, "system")
    assert (e[3].depth, e[3].role) == (None, None)
    assert (e[4].depth, e[4].role) == (0, "user")


# Matching


def test_case_insensitive_by_default_and_sensitive_when_asked() -> None:
    b = book({"keys": ["DRAGON"]}, {"keys": ["DRAGON"], "case_sensitive": True},
             {"keys": ["Straße"]})
    out = run(b, "a dragon flies over the strasse")
    assert statuses(out) == [("activated", "key_matched"), ("not_matched", "no_key_matched"),
                             ("activated", "key_matched")]
    assert out[0].key == "DRAGON" and out[0].message_id == "m0"
    assert run(b, "DRAGON")[1].status == "activated"


def test_blank_keys_never_match() -> None:
    b = book({"keys": ["", "  "]}, {"keys": [""], "use_regex": True})
    assert statuses(run(b, "any  text")) == [("not_matched", "no_key_matched")] * 2


def test_regex_literal_bare_and_flags() -> None:
    b = book({"keys": ["/dra+gon/"], "use_regex": True},
             {"keys": ["/DRAGON/"], "use_regex": True, "case_sensitive": True},
             {"keys": ["/DRA+GON/i"], "use_regex": True, "case_sensitive": True},
             {"keys": [r"\bwy(rm|vern)s?\b"], "use_regex": True},
             {"keys": ["/^start/m"], "use_regex": True},
             {"keys": ["/one.two/s"], "use_regex": True},
             {"keys": ["/one.two/gu"], "use_regex": True},
             {"keys": ["dra+gon"]})
    out = run(b, "A Draaagon and a WYVERN\nstart of line, one\ntwo")
    assert [a.status for a in out] == ["activated", "not_matched", "activated", "activated",
                                       "activated", "activated", "not_matched", "not_matched"]
    assert out[3].key == r"\bwy(rm|vern)s?\b"
    # Only JavaScript's flag letters make a literal: this is a bare pattern.
    assert statuses(run(book({"keys": ["/usr/bin"], "use_regex": True}), "see /usr/bin")) == [
        ("activated", "key_matched")]
    assert run(book({"keys": ["/usr/bin"], "use_regex": True}), "usr")[0].status == (
        "not_matched")


def test_invalid_regex_is_a_problem_and_a_reason() -> None:
    b = book({"keys": ["/(unclosed/"], "use_regex": True},
             {"keys": ["(bad", "good"], "use_regex": True})
    assert b.entries[0].problems and "invalid regex key" in b.entries[0].problems[0]
    out = run(b, "good (unclosed")
    assert statuses(out) == [("not_matched", "invalid_regex"), ("activated", "key_matched")]
    assert out[1].key == "good"


def test_a_catastrophic_regex_is_searched_in_linear_time() -> None:
    # Exponential for a backtracking engine; RE2 decides it outright, the same every run.
    b = book({"keys": ["(.*a){30}x"], "use_regex": True},
             *({"keys": ["/(a|aa)+$/"], "use_regex": True} for _ in range(60)),
             {"keys": ["/(a|aa)+b$/"], "use_regex": True})
    for _ in range(3):
        out = run(b, "a" * 5000 + "b", "a" * 5000 + "b")
        assert statuses(out) == [("not_matched", "no_key_matched")] * 61 + [
            ("activated", "key_matched")]
    assert b.entries[0].problems == ()


def test_js_flags_map_to_re2() -> None:
    def hit(key: str, text: str, **entry: Any) -> bool:
        return run(book({"keys": [key], "use_regex": True, **entry}), text)[0].status == (
            "activated")

    # i (and an entry that is not case-sensitive) folds case, Unicode included.
    assert hit("/ÉCLAIR/i", "un éclair", case_sensitive=True)
    assert not hit("/ÉCLAIR/", "un éclair", case_sensitive=True)
    assert hit("/ÉCLAIR/", "un éclair")
    # m: ^ and $ at line ends; without it, at the text's ends only ($ not before a
    # trailing line feed, as in JavaScript).
    assert hit("/^two$/m", "one\ntwo\nthree") and not hit("/^two$/", "one\ntwo\nthree")
    assert not hit("/end$/", "the end\n") and hit("/end$/m", "the end\n")
    # s: . matches a line feed.
    assert hit("/one.two/s", "one\ntwo") and not hit("/one.two/", "one\ntwo")
    # u, g, y, d change nothing for a yes/no search; u reads by code point always.
    for flags in ("u", "g", "y", "d", "gimsuy"):
        assert hit(f"/dr.gon/{flags}", "a DR😀GON" if "i" in flags else "a dr😀gon")
    # JavaScript's \u escapes are RE2's \x{...}; an escaped backslash stays one.
    assert hit(r"/\u00e9clair/", "un éclair") and hit(r"/\u{1F600}/u", "x😀")
    assert hit(r"/a\\u0041/", "a\\u0041") and not hit(r"/a\\u0041/", "aA")
    # [^] is any character and [] none; a "[" inside a class is a literal.
    assert hit("/a[^]b/", "a\nb") and not hit("/a[]b/", "ab") and not hit("/[]a]/", "a]")
    assert hit("/x[a[^]/", "x[") and hit("/[[:alpha:]]/", "[]") and not hit("/[[:alpha:]]/", "a")
    # \d, \w and \b are ASCII, as in JavaScript.
    assert not hit(r"/\d/", "٣") and hit(r"/\bcafé/", "un café")


_ATOMS = st.sampled_from(["a", "b", "A", "x", ".", "[ab]", "[^a]", r"\d", r"\w", r"\s",
                          r"\u0061", "[^]"])


def _patterns() -> st.SearchStrategy[str]:
    def grow(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
        return st.one_of(
            st.tuples(inner, inner).map("".join),
            st.tuples(inner, inner).map(lambda p: f"(?:{p[0]}|{p[1]})"),
            st.tuples(inner, st.sampled_from(["*", "+", "?", "{1,2}", "*?"])).map(
                lambda p: f"(?:{p[0]}){p[1]}"))

    return st.tuples(st.sampled_from(["", "^"]), st.recursive(_ATOMS, grow, max_leaves=6),
                     st.sampled_from(["", "$"])).map("".join)


@settings(max_examples=300, deadline=None)
@given(pattern=_patterns(), text=st.text(alphabet="abAx1 _\t", max_size=12),
       insensitive=st.booleans())
def test_re2_reads_a_common_pattern_as_a_backtracking_engine_does(
        pattern: str, text: str, insensitive: bool) -> None:
    # On ASCII text without line breaks JavaScript, Python and RE2 agree on these: the
    # reference is Python's engine, with JavaScript's spellings written its way.
    reference = pattern.replace(r"\u0061", "a").replace("[^]", r"[\s\S]")
    expected = re.search(reference, text, re.IGNORECASE if insensitive else 0) is not None
    key = f"/{pattern}/{'i' if insensitive else ''}"
    matcher = compile_key(key, case_sensitive=True, use_regex=True)
    assert matcher.problem is None
    assert matcher.search(text, text.casefold()) is expected


def test_a_pattern_re2_refuses_is_unsupported_and_says_why() -> None:
    cases = {r"/(?<=sir )knight/": "lookbehind", r"/knight(?!ess)/": "negative lookahead",
             r"/(\w)\1/": "a backreference", r"/(?<n>a)\k<n>/": "a named backreference",
             "/a{1001}/": "a repetition over 1000", r"/\cA/": "an escape RE2 does not have",
             "/[a--b]/v": "the v flag"}
    b = book(*({"keys": [key, "plain"], "use_regex": True} for key in cases),
             {"keys": ["/(unclosed/"], "use_regex": True},
             {"keys": ["(?=knight)", "knight"], "use_regex": True})
    for entry, (key, why) in zip(b.entries, cases.items(), strict=False):
        (problem,) = entry.problems
        assert problem.startswith(f"regex key {key!r} is not supported by RE2: {why}")
    out = run(b, "a knight, sir knight, aa")
    assert statuses(out) == [("not_matched", "regex_unsupported")] * len(cases) + [
        ("not_matched", "invalid_regex"), ("activated", "key_matched")]
    assert "invalid regex key '/(unclosed/': missing ):" in b.entries[-2].problems[0]
    assert b.warnings()[0] == ("lorebook 'card' entry '/(?<=sir )knight/': regex key "
                               "'/(?<=sir )knight/' is not supported by RE2: lookbehind "
                               "(invalid perl operator: (?<=)")


def test_a_lone_surrogate_is_searched_without_error() -> None:
    # One character, as a JavaScript string holds it.
    b = book({"keys": ["/dragon/"], "use_regex": True}, {"keys": ["/^.$/s"], "use_regex": True},
             {"keys": ["/^..$/s"], "use_regex": True})
    assert statuses(run(b, "a \ud800 dragon", "\udfff")) == [
        ("activated", "key_matched"), ("activated", "key_matched"),
        ("not_matched", "no_key_matched")]


def test_regex_keys_marks_a_book_whose_reading_changed() -> None:
    assert book({"keys": ["/x/"], "use_regex": True}).regex_keys
    assert not book({"keys": ["/x/"]}, {"keys": [" "], "use_regex": True}).regex_keys


def test_compile_key_is_cached() -> None:
    assert compile_key("Dragon", case_sensitive=False, use_regex=False).needle == "dragon"
    assert compile_key("x", case_sensitive=False, use_regex=True) is compile_key(
        "x", case_sensitive=False, use_regex=True)


# Activation


def test_constant_disabled_and_dont_activate() -> None:
    b = book({"constant": True}, {"constant": True, "enabled": False, "keys": ["k"]},
             {"content": "@@activate\nx"}, {"content": "@@dont_activate\nx", "keys": ["k"]},
             {"keys": ["k"], "enabled": False})
    assert statuses(run(b, "k")) == [("constant", "constant"), ("disabled", "disabled"),
                                     ("constant", "constant"), ("disabled", "dont_activate"),
                                     ("disabled", "disabled")]


def test_selective_needs_a_secondary_key_anywhere_in_the_window() -> None:
    b = book({"keys": ["sword"], "selective": True, "secondary_keys": ["castle", "keep"]},
             {"keys": ["sword"], "selective": True, "secondary_keys": []},
             {"keys": ["sword"], "selective": False, "secondary_keys": ["nowhere"]})
    assert statuses(run(b, "a sword")) == [("not_matched", "secondary_key_missing"),
                                          ("activated", "key_matched"),
                                          ("activated", "key_matched")]
    out = run(b, "the keep", "a sword")
    assert out[0].status == "activated"
    assert (out[0].key, out[0].secondary_key, out[0].message_id) == ("sword", "keep", "m1")


def test_scan_depth_window_and_newest_message() -> None:
    b = book({"keys": ["old"]}, {"keys": ["both", "zzz"]})
    texts = ("old both", "zzz", "both middle", "recent")
    out = run(b, *texts, depth=3)
    assert statuses(out) == [("not_matched", "no_key_matched"), ("activated", "key_matched")]
    assert (out[1].message_id, out[1].key) == ("m2", "both")
    assert run(b, *texts, depth=4)[0].status == "activated"
    assert run(b, *texts, depth=99)[0].message_id == "m0"
    assert [a.status for a in run(b, *texts, depth=0)] == ["not_matched"] * 2
    with pytest.raises(ValueError, match="scan_depth"):
        run(b, "x", depth=-1)


def test_first_key_in_key_order_within_the_newest_message() -> None:
    b = book({"keys": ["beta", "alpha"]})
    assert run(b, "alpha then beta")[0].key == "beta"
    assert run(b, "beta", "alpha")[0].key == "alpha"


def test_recursion_activates_from_content_with_via() -> None:
    b = book({"keys": ["start"], "content": "the tower and the moat"},
             {"keys": ["tower"], "content": "built by the wizard"},
             {"keys": ["wizard"], "content": "nothing"},
             {"keys": ["moat"], "content": "x", "extensions": {"exclude_recursion": True}},
             {"constant": True, "content": "mentions the wizard"},
             {"keys": ["unrelated"]})
    flat = run(b, "start here")
    assert [a.status for a in flat] == ["activated", "not_matched", "not_matched",
                                        "not_matched", "constant", "not_matched"]
    out = run(b, "start here", recursive=True)
    assert statuses(out) == [("activated", "key_matched"), ("activated", "recursion"),
                             ("activated", "recursion"), ("not_matched", "no_key_matched"),
                             ("constant", "constant"), ("not_matched", "no_key_matched")]
    assert (out[1].via, out[1].key) == ("lore:card:#0", "tower")
    # The wizard occurs in entry 4's content (active from the start) and entry 1's (active
    # after one round): it activates in the first round, via the entry active then.
    assert out[2].via == "lore:card:#4"
    both = book({"keys": ["start"], "content": "the wizard"}, {"keys": ["wizard"]},
                {"constant": True, "content": "the wizard"})
    assert run(both, "start", recursive=True)[1].via == "lore:card:#0"
    # The book's own setting applies when ``recursive`` is not given.
    recursive_book = parse_book("card", {"recursive_scanning": True, "entries": [
        {"keys": ["start"], "content": "the tower"}, {"keys": ["tower"], "content": "y"}]})
    assert run(recursive_book, "start")[1].reason == "recursion"
    assert run(recursive_book, "start", recursive=False)[1].status == "not_matched"


def test_recursion_chain_and_prevent_recursion() -> None:
    b = book({"keys": ["a1"], "content": "a2"}, {"keys": ["a2"], "content": "a3"},
             {"keys": ["a3"], "content": "a4", "extensions": {"prevent_recursion": True}},
             {"keys": ["a4"], "content": "a1"})
    out = run(b, "a1", recursive=True)
    assert [a.status for a in out] == ["activated", "activated", "activated", "not_matched"]
    assert [a.via for a in out] == [None, "lore:card:#0", "lore:card:#1", None]


def test_recursion_honours_secondary_keys_in_content() -> None:
    b = book({"keys": ["go"], "content": "the sword"},
             {"keys": ["sword"], "selective": True, "secondary_keys": ["castle"]},
             {"keys": ["go"], "content": "in the castle"})
    out = run(b, "go", recursive=True)
    assert out[1].reason == "recursion" and out[1].secondary_key == "castle"
    b2 = book({"keys": ["go"], "content": "the sword"},
              {"keys": ["sword"], "selective": True, "secondary_keys": ["castle"]})
    assert run(b2, "go", recursive=True)[1].status == "not_matched"


# The budget


def _active(b: Book) -> list[Activation]:
    return [Activation(e, "activated", "key_matched") for e in b.entries]


def test_fit_budget_prompt_order_and_no_budget() -> None:
    b = book({"insertion_order": 5}, {"insertion_order": 1}, {"insertion_order": 5},
             {"insertion_order": 0})
    active = _active(b)
    kept, dropped = fit_budget(list(reversed(active)), {}, None)
    assert [a.entry.index for a in kept] == [3, 1, 0, 2] and dropped == ()


def test_fit_budget_drops_lowest_priority_first_with_ties() -> None:
    b = book({"priority": 5, "insertion_order": 1},
             {"priority": 1, "insertion_order": 2},
             {"priority": 1, "insertion_order": 3},  # same priority, larger order: first
             {"priority": 1, "insertion_order": 3},  # same again, later index: before #2
             {"priority": 9, "insertion_order": 4})
    active = _active(b)
    tokens = {e.uid: 10 for e in b.entries}
    kept, dropped = fit_budget(active, tokens, 30)
    assert [a.entry.index for a in kept] == [0, 1, 4]
    assert [a.entry.index for a in dropped] == [2, 3]
    kept, dropped = fit_budget(active, tokens, 40)
    assert [a.entry.index for a in dropped] == [3]
    assert fit_budget(active, tokens, 50)[1] == ()


def test_fit_budget_oversize_entry_is_dropped_alone() -> None:
    b = book({"priority": 100}, {"priority": 1}, {"priority": 2})
    tokens = {b.entries[0].uid: 500, b.entries[1].uid: 10, b.entries[2].uid: 10}
    kept, dropped = fit_budget(_active(b), tokens, 20)
    assert [a.entry.index for a in kept] == [1, 2]
    assert [a.entry.index for a in dropped] == [0]
    with pytest.raises(KeyError, match="no token count"):
        fit_budget(_active(b), {}, 20)


# The memo


class CountingMemo:
    """A memo that counts what it builds, by the first part of the key."""

    def __init__(self) -> None:
        self.memo = CanonicalMemo()
        self.builds: dict[str, int] = {}

    def intern(self, key: Hashable, build: Callable[[], T]) -> T:
        def counted() -> T:
            kind = str(key[0]) if isinstance(key, tuple) else "?"
            self.builds[kind] = self.builds.get(kind, 0) + 1
            return build()
        return self.memo.intern(key, counted)


def test_memo_scans_only_the_new_message() -> None:
    b = book({"keys": ["dragon"], "content": "a castle"}, {"keys": ["castle"]},
             {"keys": ["ship"]}, recursive_scanning=True)
    counting = CountingMemo()
    texts = [f"message {i} about the dragon" if i == 5 else f"message {i}" for i in range(8)]
    first = activate(b, chat(*texts), scan_depth=5, intern=counting.intern)
    # Five messages, then the content of the two active entries (recursion).
    assert counting.builds == {"lore-plan": 1, "lore-baseline": 1, "lore-scan": 5 + 2}
    more = [*texts, "now a ship"]
    second = activate(b, chat(*more), scan_depth=5, intern=counting.intern)
    # The new message, and the content of the entry it activates: nothing else.
    assert counting.builds == {"lore-plan": 1, "lore-baseline": 1,
                               "lore-scan": 7 + 1 + 1}
    assert second == activate(b, chat(*more), scan_depth=5)
    assert first == activate(b, chat(*texts), scan_depth=5)
    assert [a.status for a in second] == ["activated", "activated", "activated"]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(["dragon", "DRAGON sword", "castle", "ship", "the keep",
                                 "nothing", "Wyvern!"]), max_size=12),
       st.integers(min_value=0, max_value=14), st.booleans())
def test_memo_never_changes_results(texts: list[str], depth: int, recursive: bool) -> None:
    b = book({"keys": ["dragon"], "content": "the keep"},
             {"keys": ["sword"], "selective": True, "secondary_keys": ["castle", "keep"]},
             {"keys": ["/wy(rm|vern)/"], "use_regex": True, "content": "a ship"},
             {"keys": ["ship"], "case_sensitive": True},
             {"keys": ["keep"], "extensions": {"exclude_recursion": True}},
             {"constant": True, "content": "dragon"})
    memo = CanonicalMemo()
    messages = chat(*texts)
    cold = activate(b, messages, scan_depth=depth, recursive=recursive)
    assert activate(b, messages, scan_depth=depth, recursive=recursive,
                    intern=memo.intern) == cold
    assert activate(b, messages, scan_depth=depth, recursive=recursive,
                    intern=memo.intern) == cold
    window = texts[max(0, len(texts) - depth):] if depth else []
    # Without recursion an entry activates exactly when its key is in the window.
    if not recursive:
        assert (cold[0].status == "activated") == any(
            "dragon" in t.casefold() for t in window)
        assert (cold[3].status == "activated") == any("ship" in t for t in window)


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3), st.integers(1, 30)),
                min_size=0, max_size=8),
       st.one_of(st.none(), st.integers(0, 60)))
def test_fit_budget_invariants(rows: list[tuple[int, int, int]], budget: int | None) -> None:
    b = book(*({"priority": p, "insertion_order": o} for p, o, _ in rows))
    tokens = {e.uid: size for e, (_, _, size) in zip(b.entries, rows, strict=True)}
    active = _active(b)
    kept, dropped = fit_budget(list(reversed(active)), tokens, budget)
    assert sorted(a.entry.index for a in (*kept, *dropped)) == list(range(len(rows)))
    assert [(a.entry.insertion_order, a.entry.index) for a in kept] == sorted(
        (a.entry.insertion_order, a.entry.index) for a in kept)
    if budget is None:
        assert dropped == ()
        return
    assert sum(tokens[a.entry.uid] for a in kept) <= budget
    # Apart from entries too big alone, nothing kept ranks below something dropped.
    def rank(a: Activation) -> tuple[float, float, int]:
        return (a.entry.priority, -a.entry.insertion_order, -a.entry.index)
    fitting = [a for a in dropped if tokens[a.entry.uid] <= budget]
    assert all(rank(d) < rank(k) for d in fitting for k in kept)
