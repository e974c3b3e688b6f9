"""Timelines read step by step: each step equals an independent replay, nothing of a step
is kept once the next is made, a cancellation token stops the fold, and pages of events
are bounded by bytes. On SQLite and PostgreSQL."""

from __future__ import annotations

import gc
import random
import weakref
from typing import Any

import pytest
from helpers.scenario import CARD

from ctxledger import Ledger
from ctxledger._cancel import Cancelled, CancelToken
from ctxledger.assembler.model import Assembly
from ctxledger.store.records import RecordedEvent


def _random_session(ledger: Ledger, seed: int, messages: int) -> str:
    """A card session drawn from ``seed``: messages of any length and role, with ids,
    replacements, retractions, a summary and setting changes among them."""
    rng = random.Random(seed)
    session = f"prop-{seed}"
    ledger.append(session, [{"type": "session.started", "data": {"scope": "p"}},
                            {"type": "card.set", "data": CARD}])
    ids: list[str] = []
    for index in range(messages):
        draw = rng.random()
        if draw < 0.08 and ids:
            ledger.append(session, {"type": "message.retracted",
                                    "data": {"message_id": ids.pop(rng.randrange(len(ids)))}})
        elif draw < 0.14:
            key, value = rng.choice([("context_limit", rng.choice([60, 120, 400])), (
                "compression_level", rng.choice(["chat_only", "aggressive", "chat_dialogue"]))])
            ledger.append(session, {"type": "setting.changed",
                                    "data": {"key": key, "value": value}})
        elif draw < 0.17 and len(ids) > 2:
            ledger.append(session, {"type": "history.summarized", "data": {
                "through_message_id": ids[len(ids) // 2], "summary": f"summary {index}"}})
        message_id = f"m{index}" if rng.random() < 0.5 else (
            rng.choice(ids) if ids and rng.random() < 0.2 else None)
        data: dict[str, Any] = {"role": rng.choice(["user", "assistant"]),
                                "content": " ".join(["word"] * rng.randrange(1, 60))
                                + f" {index}"}
        if message_id is not None:
            data["message_id"] = message_id
            ids.append(message_id)
        ledger.append(session, {"type": "message.appended", "data": data})
    return session


@pytest.mark.parametrize("seed", [3, 11])
def test_every_streamed_step_equals_an_independent_replay(ledger: Ledger, seed: int) -> None:
    """Property over drawn sessions: each step of ``iter_timeline`` has the digest and
    the decisions of ``replay(until=<its position>)``, and ``timeline`` gives the same."""
    session = _random_session(ledger, seed, 14)
    listed = [(s.position, s.assembly.digest) for s in ledger.timeline(session)]
    streamed = []
    for step in ledger.iter_timeline(session):
        again = ledger.replay(session, until=step.position)
        assert (step.assembly.digest, step.assembly.decisions) == (
            again.digest, again.decisions), (seed, step.step)
        streamed.append((step.position, step.assembly.digest))
    assert streamed == listed and len(streamed) >= 14


def _live_assemblies() -> int:
    gc.collect()
    return sum(1 for found in gc.get_objects() if isinstance(found, Assembly))


def test_a_step_is_not_kept_once_the_next_is_made(ledger: Ledger) -> None:
    """The iterator keeps no step: each step's assembly is gone once the caller drops it,
    and ``why`` and the chart hold no assembly when they return."""
    session = _random_session(ledger, 5, 10)
    before = _live_assemblies()
    refs: list[weakref.ref[Assembly]] = []
    for step in ledger.iter_timeline(session):
        refs.append(weakref.ref(step.assembly))
        del step
        assert all(ref() is None for ref in refs[:-1])
    assert len(refs) >= 10
    item = next(d.item for d in ledger.replay(session).decisions)
    report = ledger.why(session, item)
    chart = ledger.timeline_chart(session)
    assert report.steps == len(refs) == len(chart.steps)
    assert _live_assemblies() == before


def test_a_tripped_token_stops_the_fold_at_the_next_step(ledger: Ledger) -> None:
    session = _random_session(ledger, 7, 12)
    token = CancelToken()
    seen = 0
    with pytest.raises(Cancelled, match="stopped: enough"):
        for _ in ledger.iter_timeline(session, cancel=token):
            seen += 1
            if seen == 3:
                token.cancel("enough")
    assert seen == 3
    # Steps skipped by ``only`` are folded, and checked, too.
    late = CancelToken()
    late.cancel("at once")
    with pytest.raises(Cancelled):
        ledger.why(session, "card:description", cancel=late)
    counting = CancelToken()
    total = len(ledger.timeline(session, only=range(1, 2), cancel=counting))
    assert total == 1 and counting.checks > ledger.timeline_length(session)


@pytest.mark.parametrize("seed", [3, 11])
def test_what_if_equals_two_independent_timelines(ledger: Ledger, seed: int) -> None:
    """A what-if folds once and assembles each step under both policies: its changes are
    exactly those between the two timelines read on their own, it keeps no assembly, and
    a tripped token stops it."""
    session = _random_session(ledger, seed, 14)
    policy = {"profile": "card", "compression_level": "none", "context_limit": 90}
    expected = []
    for old, new in zip(ledger.timeline(session), ledger.timeline(session, policy=policy),
                        strict=True):
        was = {d.item: (d.action, d.reason) for d in old.assembly.decisions}
        now = {d.item: (d.action, d.reason) for d in new.assembly.decisions}
        expected += [(old.step, item, was[item], now[item]) for item in sorted(was)
                     if item in now and was[item] != now[item]]
    before = _live_assemblies()
    report = ledger.what_if(session, policy)
    assert _live_assemblies() == before
    # The items both timelines decided on their own (not through a range, not absent).
    got = sorted((c.step, c.item, (c.old_action, c.old_reason), (c.new_action, c.new_reason))
                 for c in report.changes if " via " not in c.old_reason + c.new_reason
                 and "absent" not in (c.old_action, c.new_action))
    assert got == sorted(expected) and expected
    assert report.steps == ledger.timeline_length(session)
    token = CancelToken()
    token.cancel("enough")
    with pytest.raises(Cancelled, match="enough"):
        ledger.what_if(session, policy, cancel=token)


def _size(event: RecordedEvent) -> int:
    return len(str(event.data.get("content", "")))


def test_a_page_stops_before_the_event_that_would_overflow_it(ledger: Ledger) -> None:
    """By bytes as well as by count; always one event; the cursor goes on exactly there,
    so every event comes once, for the whole log and for one stream."""
    sizes = [300, 300, 500, 900, 2_000, 100, 100, 100, 700]
    ledger.append("big", {"type": "session.started", "data": {"scope": "p"}})
    for index, size in enumerate(sizes):
        ledger.append("big", {"type": "message.appended",
                              "data": {"role": "user", "content": "x" * size}})
        if index % 3 == 0:
            ledger.append("other", {"type": "message.appended",
                                    "data": {"role": "user", "content": "y" * 10}})
    for stream in (None, "big"):
        expected = ledger.events(stream)
        got: list[RecordedEvent] = []
        pages: list[list[int]] = []
        after, more = 0, True
        while more:
            page, more = ledger.events_page(stream, after=after, limit=4, max_bytes=1_000,
                                            size=_size)
            assert page or not more
            assert len(page) <= 4
            assert len(page) == 1 or sum(_size(e) for e in page) <= 1_000
            got += page
            pages.append([_size(e) for e in page])
            after = page[-1].position if page else after
        assert [e.position for e in got] == [e.position for e in expected], stream
        assert [2_000] in pages  # larger than a page: alone on its own
