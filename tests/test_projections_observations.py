"""Observations per scope (most recent N, oldest first) and the previous session."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from freezegun import freeze_time

from ctxledger import Ledger
from ctxledger.projections.session_view import ViewRequest

T0 = datetime(2026, 2, 1, 8, 0, tzinfo=UTC)


def ev(type_: str, **data: Any) -> dict[str, Any]:
    return {"type": type_, "data": data}


def obs(content: str, kind: str = "finding", **extra: Any) -> dict[str, Any]:
    return ev("observation.recorded", kind=kind, content=content, **extra)


def test_observations_are_per_scope_most_recent_oldest_first(ledger: Ledger) -> None:
    with freeze_time(T0) as frozen:
        ledger.append("s1", ev("session.started", scope="proj"))
        ledger.append("s2", ev("session.started", scope="proj"))
        ledger.append("x", ev("session.started", scope="other"))
        for i in range(5):
            frozen.tick(timedelta(minutes=1))
            ledger.append("s1" if i % 2 else "s2", obs(f"o{i}", source="git" if i else None))
            ledger.append("x", obs(f"x{i}"))
    view = ledger.view("s1", ViewRequest(observations=3))
    assert [o.content for o in view.observations] == ["o2", "o3", "o4"]
    assert [o.stream_id for o in view.observations] == ["s2", "s1", "s2"]
    assert view.observations[-1].recorded_at == T0 + timedelta(minutes=5)
    assert view.observations[-1].source == "git"
    everything = ledger.view("s1", ViewRequest(observations=100)).observations
    assert [o.content for o in everything] == ["o0", "o1", "o2", "o3", "o4"]
    assert everything[0].source is None
    assert [o.content for o in ledger.view("x", ViewRequest(observations=2)).observations] == [
        "x3", "x4"]
    assert ledger.view("s1").observations == ()


def test_session_without_start_records_in_the_default_scope(ledger: Ledger) -> None:
    ledger.append("loose", obs("noticed", kind="change"))
    ledger.append("fresh", ev("session.started"))
    got = ledger.view("fresh", ViewRequest(observations=5)).observations
    assert [(o.kind, o.content, o.stream_id) for o in got] == [("change", "noticed", "loose")]


def test_previous_session_is_the_scopes_last_ended_other_session(ledger: Ledger) -> None:
    ledger.append("a", ev("session.started", scope="proj"))
    ledger.append("b", ev("session.started", scope="proj"))
    ledger.append("c", ev("session.started", scope="proj"))
    ledger.append("z", ev("session.started", scope="elsewhere"))
    request = ViewRequest(previous_session=True)
    assert ledger.view("c", request).previous_session is None
    ledger.append("b", ev("session.ended", summary="did B"))
    ledger.append("a", ev("session.ended", summary="did A"))
    ledger.append("z", ev("session.ended", summary="did Z"))
    prev = ledger.view("c", request).previous_session
    assert prev is not None and (prev.stream_id, prev.summary) == ("a", "did A")
    # A session is never its own previous session.
    prev_a = ledger.view("a", request).previous_session
    assert prev_a is not None and prev_a.stream_id == "b"
    ledger.append("c", ev("session.ended"))
    prev = ledger.view("a", request).previous_session
    assert prev is not None and (prev.stream_id, prev.summary) == ("c", None)
    assert prev.ended_at is not None
