"""What the provider billed (``usage.reported``), on SQLite and PostgreSQL: through the
library, the CLI and HTTP; beside the predicted tokens in the audit (a context billed
above its ``context_limit`` flagged, a Claude estimate's error per scope); summed per
scope, model and day by the nightly rollup and shown by ``usage``."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from helpers.scenario import StepClock
from helpers.service import client, make_key
from helpers.service_fixtures import Served, fresh, served
from typer.testing import CliRunner

from ctxledger import Assembly, Ledger
from ctxledger._config import ENV_VAR
from ctxledger.cli import app
from ctxledger.projections.rollup_day import DayFigures
from ctxledger.projections.usage_rollups import usage_daily_billed
from ctxledger.store.errors import LedgerError

__all__ = ["served"]  # the fixture, used by name

DAY = date(2026, 3, 2)


def at(day: date, hour: int = 0) -> datetime:
    return datetime(day.year, day.month, day.day, hour, tzinfo=UTC)


def ev(type_: str, **data: Any) -> dict[str, Any]:
    return {"type": type_, "data": data}


def chat(ledger: Ledger, session: str, scope: str = "p", *settings: dict[str, Any],
         turns: int = 3) -> None:
    ledger.append(session, [ev("session.started", scope=scope), *settings,
                            ev("card.set", name="Mara", description="A ship's captain."),
                            *(ev("message.appended", role="user" if n % 2 == 0 else
                                 "assistant", content=f"line {n} of the voyage log")
                              for n in range(turns))])


def sent(ledger: Ledger, session: str) -> Assembly:
    """Assemble and record, as an app does before the call."""
    assembly = ledger.assemble(session, "card")
    ledger.record_assembly(session, assembly)
    return assembly


@pytest.fixture
def clock() -> StepClock:
    return StepClock(at(DAY, 9))


@pytest.fixture
def timed(db_url: str, clock: StepClock) -> Iterator[Ledger]:
    with Ledger.open(db_url, clock=clock) as opened:
        yield opened


# -- the library ---------------------------------------------------------------------------

def test_a_report_names_the_recorded_assembly_by_digest_or_position(ledger: Ledger) -> None:
    chat(ledger, "s")
    first = sent(ledger, "s")
    record = ledger.events("s")[-1].position
    by_assembly = ledger.report_usage("s", model="gpt-4o", input_tokens=40, output_tokens=7,
                                      cached_tokens=8, cost=0.00021, assembly=first)
    by_digest = ledger.report_usage("s", model="gpt-4o", input_tokens=41, output_tokens=7,
                                    assembly=first.digest)
    by_position = ledger.report_usage("s", model="gpt-4o", input_tokens=42, output_tokens=7,
                                      assembly=first.position)
    found = [e for e in ledger.events("s") if e.type == "usage.reported"]
    assert [e.position for e in found] == [*by_assembly.positions, *by_digest.positions,
                                           *by_position.positions]
    assert found[0].data == {"model": "gpt-4o", "input_tokens": 40, "output_tokens": 7,
                             "cached_tokens": 8, "cost": 0.00021, "digest": first.digest,
                             "record_position": record}
    assert {e.data["record_position"] for e in found} == {record}
    alone = ledger.report_usage("s", model="gpt-4o", input_tokens=5, output_tokens=1)
    assert ledger.events("s")[-1].data == {"model": "gpt-4o", "input_tokens": 5,
                                           "output_tokens": 1, "cached_tokens": 0}
    assert alone.positions == (ledger.head(),)


def test_a_retry_with_the_same_id_is_written_once(ledger: Ledger) -> None:
    chat(ledger, "s")
    first = sent(ledger, "s")
    kwargs: dict[str, Any] = {"model": "gpt-4o", "input_tokens": 40, "output_tokens": 7,
                              "assembly": first, "event_id": str(uuid.uuid4())}
    once = ledger.report_usage("s", **kwargs)
    again = ledger.report_usage("s", **kwargs)
    assert again.duplicate and again.positions == once.positions


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"assembly": "0" * 64}, "has no recorded assembly with digest 0000000000000000..."),
    ({"assembly": 999}, "has no recorded assembly with position 999"),
    ({"assembly": "not-a-digest"}, "is not 64 lowercase hex characters"),
    ({"cached_tokens": 41}, "cached_tokens (41) exceeds input_tokens (40)"),
    ({"input_tokens": -1}, "input_tokens"),
    ({"cost": float("nan")}, "cost"),
    ({"model": ""}, "model"),
])
def test_bad_input_is_one_line_and_writes_nothing(ledger: Ledger, kwargs: dict[str, Any],
                                                  message: str) -> None:
    chat(ledger, "s")
    sent(ledger, "s")
    head = ledger.head()
    call: dict[str, Any] = {"model": "gpt-4o", "input_tokens": 40, "output_tokens": 7}
    call.update(kwargs)
    with pytest.raises(LedgerError) as raised:
        ledger.report_usage("s", **call)
    assert message in str(raised.value) and "\n" not in str(raised.value)
    assert ledger.head() == head


def test_an_unknown_session_or_another_sessions_assembly_is_refused(ledger: Ledger) -> None:
    chat(ledger, "s")
    chat(ledger, "t")
    theirs = sent(ledger, "t")
    with pytest.raises(LedgerError, match="unknown session 'nobody'"):
        ledger.report_usage("nobody", model="gpt-4o", input_tokens=1, output_tokens=1)
    with pytest.raises(LedgerError, match="session 's' has no recorded assembly"):
        ledger.report_usage("s", model="gpt-4o", input_tokens=1, output_tokens=1,
                            assembly=theirs)


# -- the audit ----------------------------------------------------------------------------

def test_the_audit_sets_billed_beside_predicted_and_flags_a_context_over_its_limit(
        ledger: Ledger) -> None:
    chat(ledger, "s", "p", ev("setting.changed", key="context_limit", value=200))
    fits = sent(ledger, "s")
    ledger.report_usage("s", model="gpt-4o", input_tokens=fits.tokens.total + 2,
                        output_tokens=9, assembly=fits)
    ledger.append("s", ev("message.appended", role="user", content="and one more line"))
    over = sent(ledger, "s")
    ledger.report_usage("s", model="gpt-4o", input_tokens=230, output_tokens=9,
                        assembly=over)
    ledger.append("s", ev("message.appended", role="assistant", content="aye"))
    unbilled = sent(ledger, "s")
    report = ledger.audit("s")
    assert report.ok  # billing says nothing of tampering
    rows = [(e.predicted_tokens, e.billed_input_tokens, e.context_limit, e.over_limit)
            for e in report.entries]
    assert rows == [(fits.tokens.total, fits.tokens.total + 2, 200, False),
                    (over.tokens.total, 230, 200, True),
                    (unbilled.tokens.total, None, 200, False)]
    assert report.over_limit == 1
    data = json.loads(json.dumps(report.to_json()))
    assert data["over_limit"] == 1 and data["records"][1]["over_limit"] is True
    assert data["records"][1]["billed_model"] == "gpt-4o"
    assert data["estimates"] == []  # gpt-4o is counted by its own tokenizer


def test_the_audit_reports_a_claude_estimates_error_over_the_scope(ledger: Ledger) -> None:
    claude = ev("setting.changed", key="model", value="claude-sonnet-4-5")
    billed: list[tuple[int, int]] = []
    for session, factor in (("a", 1.10), ("b", 1.30)):
        chat(ledger, session, "ship", claude)
        assembly = sent(ledger, session)
        assert all(m.startswith("estimate:") for m in assembly.tokens.methods)
        bill = round(assembly.tokens.total * factor)
        billed.append((assembly.tokens.total, bill))
        ledger.report_usage(session, model="claude-sonnet-4-5", input_tokens=bill,
                            output_tokens=3, assembly=assembly)
    chat(ledger, "other", "elsewhere", claude)
    elsewhere = sent(ledger, "other")
    ledger.report_usage("other", model="claude-sonnet-4-5", input_tokens=elsewhere.tokens.total,
                        output_tokens=3, assembly=elsewhere)
    report = ledger.audit()
    by_scope = {x.scope: x for x in report.estimates}
    assert set(by_scope) == {"ship", "elsewhere"}
    ship = by_scope["ship"]
    predicted, bill = sum(p for p, _ in billed), sum(b for _, b in billed)
    assert (ship.model, ship.records, ship.predicted, ship.billed) == (
        "claude-sonnet-4-5", 2, predicted, bill)
    assert ship.error_pct == round(100 * (predicted - bill) / bill, 2)
    worst = max(((p - b) / b for p, b in billed), key=abs)
    assert ship.worst_pct == round(100 * worst, 2) and ship.worst_pct < ship.error_pct < 0
    assert by_scope["elsewhere"].error_pct == 0.0
    one = ledger.audit("a")
    assert [x.records for x in one.estimates] == [1]


# -- the rollup and usage ------------------------------------------------------------------

def billed_rows(ledger: Ledger) -> list[tuple[Any, ...]]:
    with ledger.engine.connect() as conn:
        t = usage_daily_billed.c
        return [tuple(r) for r in conn.execute(
            sa.select(t.scope, t.model, t.day, t.calls, t.input_tokens, t.output_tokens,
                      t.cached_tokens, t.cost).order_by(t.day, t.scope, t.model))]


def test_the_rollup_sums_billing_per_scope_model_and_day(timed: Ledger,
                                                         clock: StepClock) -> None:
    chat(timed, "s", "p")
    chat(timed, "t", "q")
    for day, calls in ((DAY, 3), (DAY + timedelta(days=1), 2)):
        clock.now = at(day, 10)
        for n in range(calls):
            clock.tick(timedelta(minutes=5))
            assembly = sent(timed, "s")
            timed.report_usage("s", model="gpt-4o", input_tokens=100 + n, output_tokens=10,
                               cached_tokens=n, cost=0.1, assembly=assembly)
            timed.report_usage("s", model="claude-sonnet-4-5", input_tokens=50,
                               output_tokens=5)
            timed.report_usage("t", model="gpt-4o", input_tokens=7, output_tokens=1)
    today = DAY + timedelta(days=2)
    clock.now = at(today, 1)
    before = timed.usage("p", days=3)
    timed.rollup()
    assert billed_rows(timed) == [
        ("p", "claude-sonnet-4-5", DAY, 3, 150, 15, 0, None),
        ("p", "gpt-4o", DAY, 3, 303, 30, 3, pytest.approx(0.3)),
        ("q", "gpt-4o", DAY, 3, 21, 3, 0, None),
        ("p", "claude-sonnet-4-5", DAY + timedelta(days=1), 2, 100, 10, 0, None),
        ("p", "gpt-4o", DAY + timedelta(days=1), 2, 201, 20, 1, pytest.approx(0.2)),
        ("q", "gpt-4o", DAY + timedelta(days=1), 2, 14, 2, 0, None)]
    after = timed.usage("p", days=3)
    assert [d.source for d in after.days] == ["rollup", "rollup", "raw"]
    # The same figures from raw rows and from the rollups.
    strip = [d.model_dump(exclude={"source"}) for d in before.days]
    assert [d.model_dump(exclude={"source"}) for d in after.days] == strip
    assert [(d.calls, d.billed_input, d.billed_output, d.cost) for d in after.days] == [
        (6, 453, 45, 0.3), (4, 301, 30, 0.2), (0, 0, 0, None)]
    assert [(m.model, m.calls, m.input_tokens, m.cached_tokens, m.cost)
            for m in after.models] == [("gpt-4o", 5, 504, 4, 0.5),
                                       ("claude-sonnet-4-5", 5, 250, 0, None)]


def test_a_day_without_billing_hashes_as_before() -> None:
    # The digest of rollup.completed events written before billing existed.
    assert DayFigures(DAY).digest() == DayFigures(DAY, billed=[]).digest()
    billed = DayFigures(DAY, billed=[{"scope": "p", "model": "m", "calls": 1,
                                      "input_tokens": 1, "output_tokens": 1,
                                      "cached_tokens": 0, "cost": None}])
    assert billed.digest() != DayFigures(DAY).digest()


# -- the CLI -------------------------------------------------------------------------------

def test_the_cli_reports_usage_and_shows_it(db_url: str,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_VAR, db_url)
    with Ledger.open(db_url) as ledger:
        chat(ledger, "s", "p", ev("setting.changed", key="context_limit", value=20))
        assembly = sent(ledger, "s")
    runner = CliRunner()
    done = runner.invoke(app, ["report-usage", "s", "--model", "gpt-4o", "--input", "25",
                               "--output", "4", "--cost", "0.002", "--digest",
                               assembly.digest])
    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout)["positions"]
    refused = runner.invoke(app, ["report-usage", "s", "--model", "gpt-4o", "--input",
                                  "25", "--output", "4", "--position", "9999"])
    assert refused.exit_code == 1
    assert refused.output.strip().splitlines() == [
        "error: session 's' has no recorded assembly with position 9999 (record what is "
        "sent with record_assembly, 'assemble --record' or record=true)"]
    audit = runner.invoke(app, ["audit", "s", "--format", "text"])
    assert "1 context(s) billed above their context_limit" in audit.stdout
    usage = runner.invoke(app, ["usage", "--scope", "p", "--format", "json"])
    report = json.loads(usage.stdout)
    assert report["models"] == [{"model": "gpt-4o", "calls": 1, "input_tokens": 25,
                                 "output_tokens": 4, "cached_tokens": 0, "cost": 0.002}]


def test_the_cli_records_what_it_assembles_and_bills_it(db_url: str,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_VAR, db_url)
    with Ledger.open(db_url) as ledger:
        chat(ledger, "s", "p")
        before = ledger.head()
    runner = CliRunner()
    plain = runner.invoke(app, ["assemble", "s", "--profile", "card"])
    assert plain.exit_code == 0, plain.output
    with Ledger.open(db_url) as ledger:
        assert ledger.head() == before  # without --record nothing is written
    done = runner.invoke(app, ["assemble", "s", "--profile", "card", "--record"])
    assert done.exit_code == 0, done.output
    digest = json.loads(done.stdout)["digest"]
    assert done.stderr.strip() == f"recorded context.assembled at position {before + 1}"
    billed = runner.invoke(app, ["report-usage", "s", "--model", "gpt-4o", "--input", "9",
                                 "--output", "2", "--digest", digest])
    assert billed.exit_code == 0, billed.output
    audit = runner.invoke(app, ["audit", "s", "--format", "json"])
    assert audit.exit_code == 0, audit.output
    [entry] = json.loads(audit.stdout)["records"]
    assert (entry["status"], entry["record_position"]) == ("match", before + 1)
    assert (entry["billed_input_tokens"], entry["billed_model"]) == (9, "gpt-4o")


# -- HTTP ----------------------------------------------------------------------------------

def test_http_reports_usage_within_the_keys_scope(served: Served) -> None:
    mine, theirs = fresh("mine"), fresh("theirs")
    with Ledger.open(served.url) as ledger:
        chat(ledger, f"{mine}-s", mine)
        chat(ledger, f"{theirs}-s", theirs)
        assembly = sent(ledger, f"{mine}-s")
        other = sent(ledger, f"{theirs}-s")
    with client(served.base, make_key(served.url, [mine])) as http:
        body = {"model": "gpt-4o", "input_tokens": 30, "output_tokens": 2,
                "digest": assembly.digest, "id": str(uuid.uuid4())}
        done = http.post(f"/sessions/{mine}-s/usage", json=body)
        assert done.status_code == 200, done.text
        again = http.post(f"/sessions/{mine}-s/usage", json=body)
        assert again.json()["duplicate"] is True
        # Another scope's session, or its assembly: not found, nothing written.
        hidden = http.post(f"/sessions/{theirs}-s/usage", json={**body, "id": str(uuid.uuid4())})
        assert hidden.status_code == 404
        foreign = http.post(f"/sessions/{mine}-s/usage",
                            json={**body, "digest": other.digest, "id": str(uuid.uuid4())})
        assert foreign.status_code == 404
        assert foreign.headers["content-type"] == "application/problem+json"
        assert "has no recorded assembly" in foreign.json()["detail"]
        bad = http.post(f"/sessions/{mine}-s/usage",
                        json={**body, "cached_tokens": 31, "id": str(uuid.uuid4())})
        assert bad.status_code == 400 and "exceeds input_tokens" in bad.json()["detail"]
        audit = http.get(f"/sessions/{mine}-s/audit").json()
        assert audit["records"][0]["billed_input_tokens"] == 30
    with Ledger.open(served.url) as ledger:
        reports = [e for e in ledger.events(f"{mine}-s") if e.type == "usage.reported"]
        assert len(reports) == 1
        assert not [e for e in ledger.events(f"{theirs}-s") if e.type == "usage.reported"]
