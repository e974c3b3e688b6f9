"""Profile ``novel`` re-assembled warm (issue #9): the ledger's in-process memos (the
session's item set, each item's tier and details, interned decisions and report rows,
their canonical JSON) change how long an assembly takes, never what it is. A warm
assembly after puts, re-puts, chapter moves and removals is byte for byte the cold one:
a fresh ledger, a fresh process, and the engine without any memo.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxledger import Ledger
from ctxledger.assembler import assemble
from ctxledger.assembler.digest import canonical_payload, compute_digest
from ctxledger.assembler.memo import CanonicalMemo, SessionMemos
from ctxledger.assembler.model import Assembly
from ctxledger.projections.read_view import load_session_view
from ctxledger.projections.view import ViewRequest

NOW = datetime(2026, 4, 2, 12, 0, tzinfo=UTC)
BOOK = "book"
SETTINGS = {"token_encoding": "chars4", "hot_budget": 90, "warm_budget": 120,
            "cold_budget": 150, "warm_window": 3}
"""Small budgets, so every tier drops items and a change moves the drop sizes."""
KINDS = ("summary", "summary", "world", "character", "relationship_state", "foreshadowing",
         "plot", "style", "act_summary", "exemplar", "anti_exemplar", "emotional_directive",
         "scene_plan")


def put(rng: random.Random, item_id: str, kind: str | None = None) -> dict[str, Any]:
    """An ``item.put`` of ``kind`` (random if None) with the flags its kind reads."""
    kind = kind or rng.choice(KINDS)
    data: dict[str, Any] = {"item_id": item_id, "kind": kind,
                            "content": f"{item_id} " + "x" * rng.randint(4, 60)}
    if kind in ("summary", "relationship_state"):
        data["chapter"] = rng.choice([None, *range(1, 15)])
    if kind in ("character", "relationship_state"):
        data["in_scene"] = rng.random() < 0.3
    if kind in ("relationship_state", "scene_plan"):
        data["evolving"] = rng.random() < 0.5
    if kind == "character":
        data["pov"] = rng.random() < 0.2
    if kind == "foreshadowing":
        data["active"] = rng.random() < 0.5
    return {"type": "item.put", "data": data}


def start(ledger: Ledger, rng: random.Random, items: int) -> None:
    ledger.append(BOOK, [
        {"type": "session.started", "data": {"scope": "b"}},
        *({"type": "setting.changed", "data": {"key": key, "value": value}}
          for key, value in SETTINGS.items()),
        {"type": "chapter.moved", "data": {"chapter": 10}},
        *(put(rng, f"i{n:03d}") for n in range(items))])


def cold(url: str) -> Assembly:
    """The assembly a fresh ledger (empty memos) makes."""
    with Ledger.open(url) as fresh:
        return fresh.assemble(BOOK, "novel", now=NOW)


def without_memos(url: str) -> Assembly:
    """The assembly the assembler makes with no memo at all (as replay does)."""
    with Ledger.open(url) as fresh, fresh.log.connection() as conn:
        view = load_session_view(conn, BOOK, ViewRequest(now=NOW, items=True))
    return assemble(view, "novel", NOW)


def assert_same(warm: Assembly, reference: Assembly) -> None:
    assert warm.digest == reference.digest
    assert canonical_payload(warm) == canonical_payload(reference)
    assert warm.model_dump_json() == reference.model_dump_json()
    # The digest sealed with the memo is the one computed without it.
    assert compute_digest(warm) == warm.digest


def test_warm_equals_cold_after_puts_moves_and_removals(db_url: str) -> None:
    rng = random.Random(9)
    steps: list[list[dict[str, Any]]] = [
        [put(rng, "new-1", "world")],
        [{"type": "chapter.moved", "data": {"chapter": 13}}],   # the warm window shifts
        [put(rng, "i005", "summary")],                           # a re-put moves to the end
        [{"type": "item.removed", "data": {"item_id": "i010"}}],
        [{"type": "chapter.moved", "data": {"chapter": 7}}],
        [put(rng, "plan-2", "scene_plan")],                      # the scene plan changes
        [{"type": "item.removed", "data": {"item_id": "plan-2"}},
         put(rng, "new-2", "emotional_directive")],
        [{"type": "item.removed", "data": {"item_id": "never-put"}}],
        [{"type": "setting.changed", "data": {"key": "warm_window", "value": 5}}],
        [{"type": "chapter.moved", "data": {"chapter": 7}}],     # the same chapter again
    ]
    with Ledger.open(db_url) as ledger:
        start(ledger, rng, 80)
        assert_same(ledger.assemble(BOOK, "novel", now=NOW), cold(db_url))
        for events in steps:
            ledger.append(BOOK, events)
            warm = ledger.assemble(BOOK, "novel", now=NOW)
            assert_same(warm, cold(db_url))
            assert_same(warm, without_memos(db_url))
            assert ledger.assemble(BOOK, "novel", now=NOW).digest == warm.digest


def test_warm_equals_an_assembly_in_a_fresh_process(sqlite_url: str) -> None:
    rng = random.Random(12)
    with Ledger.open(sqlite_url) as ledger:
        start(ledger, rng, 60)
        ledger.assemble(BOOK, "novel", now=NOW)
        ledger.append(BOOK, [put(rng, "late", "world"),
                             {"type": "chapter.moved", "data": {"chapter": 12}}])
        warm = ledger.assemble(BOOK, "novel", now=NOW)
    script = (
        "import sys; from datetime import datetime; from ctxledger import Ledger\n"
        "with Ledger.open(sys.argv[1]) as ledger:\n"
        "    a = ledger.assemble('book', 'novel', now=datetime.fromisoformat(sys.argv[2]))\n"
        "print(a.model_dump_json())\n")
    out = subprocess.run([sys.executable, "-c", script, sqlite_url, NOW.isoformat()],
                         check=True, capture_output=True, text=True).stdout
    assert json.loads(out) == json.loads(warm.model_dump_json())
    assert out.strip() == warm.model_dump_json()


def test_the_memo_reuses_what_did_not_change(sqlite_url: str) -> None:
    memos = SessionMemos()
    rng = random.Random(3)
    with Ledger.open(sqlite_url) as ledger:
        start(ledger, rng, 40)
        ledger._local.memos = memos  # this thread's memos, to look into
        ledger.assemble(BOOK, "novel", now=NOW)
        memo = memos.for_session(BOOK)
        before = memo.built
        again = ledger.assemble(BOOK, "novel", now=NOW)
        assert memo.built == before  # nothing new: every decision and row reused
        item_set = memos.item_set(BOOK)
        assert item_set is not None and len(item_set.items) == 40
        ledger.append(BOOK, {"type": "chapter.moved", "data": {"chapter": 11}})
        ledger.assemble(BOOK, "novel", now=NOW)
        moved = memos.item_set(BOOK)
        # The view started from the kept set and read no item row: the same tuple.
        assert moved is not None and moved.items is item_set.items
        assert moved.position > item_set.position
        ledger.append(BOOK, put(rng, "one-more", "plot"))
        before = memo.built
        after = ledger.assemble(BOOK, "novel", now=NOW)
        assert after.digest != again.digest
        assert memo.built - before < len(after.decisions)
        last = memos.item_set(BOOK)
        assert last is not None
        assert [i.item_id for i in last.items][-1] == "one-more"


def test_memo_generations_stay_bounded() -> None:
    memo = CanonicalMemo()
    for round_ in range(50):
        for n in range(10):
            memo.intern(("k", round_, n), lambda: object())
        memo.assembled()
    assert len(memo._models) + len(memo._old_models) <= 4 * 10 * 2


# -- random sequences ---------------------------------------------------------------------

ITEM_IDS = [f"i{n}" for n in range(12)]
steps_strategy = st.lists(st.one_of(
    st.tuples(st.just("put"), st.sampled_from(ITEM_IDS), st.sampled_from(KINDS),
              st.integers(0, 10_000)),
    st.tuples(st.just("move"), st.integers(1, 16)),
    st.tuples(st.just("remove"), st.sampled_from(ITEM_IDS))), min_size=1, max_size=8)


@settings(max_examples=20, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(steps=steps_strategy, seed=st.integers(0, 1_000))
def test_random_changes_warm_equals_cold(steps: list[tuple[Any, ...]], seed: int) -> None:
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory() as directory:
        url = f"sqlite:///{Path(directory) / 'ledger.db'}"
        with Ledger.open(url) as ledger:
            start(ledger, rng, 15)
            ledger.assemble(BOOK, "novel", now=NOW)
            for step in steps:
                if step[0] == "put":
                    event = put(random.Random(step[3]), step[1], step[2])
                elif step[0] == "move":
                    event = {"type": "chapter.moved", "data": {"chapter": step[1]}}
                else:
                    event = {"type": "item.removed", "data": {"item_id": step[1]}}
                ledger.append(BOOK, event)
                assert_same(ledger.assemble(BOOK, "novel", now=NOW), cold(url))
