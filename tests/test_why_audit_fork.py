"""``why``, ``audit`` (with what-if) and ``fork`` (SPEC §4), on SQLite and PostgreSQL,
through the Python API and the CLI."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from helpers.assertions import one_error_line
from helpers.scenario import StepClock, load_scenario
from typer.testing import CliRunner, Result

from ctxledger import Ledger, LedgerError
from ctxledger._config import ENV_VAR
from ctxledger.cli import app
from ctxledger.cli._errors import DEBUG_ENV_VAR
from ctxledger.timetravel._why import decision_numbers

CUSTOM = {"profile": "card", "compression_level": "none"}


@pytest.fixture
def loaded(db_url: str) -> Any:
    """The replay scenario in a ledger driven by a step clock."""
    clock = StepClock()
    with Ledger.open(db_url, clock=clock) as ledger:
        load_scenario(ledger, clock)
        yield ledger, clock


def _cli(db_url: str, *args: str) -> Result:
    runner = CliRunner(env={ENV_VAR: None, DEBUG_ENV_VAR: None, "COLUMNS": "160"})
    return runner.invoke(app, ["--db", db_url, *args])


# -- why ---------------------------------------------------------------------------------------


def test_why_collapses_each_steps_decision_into_runs(loaded: Any) -> None:
    ledger, _ = loaded
    report = ledger.why("chat-1", "mes_example")
    steps = ledger.timeline("chat-1")
    per_step = [(s.assembly.decision("mes_example").action,
                 s.assembly.decision("mes_example").reason) for s in steps]
    expanded = [(run.action, run.reason) for run in report.runs
                for _ in range(run.first, run.last + 1)]
    assert expanded == per_step
    assert [r.first for r in report.runs] == sorted(r.first for r in report.runs)
    # SPEC: expired once the level reaches chat_dialogue and 5 messages are not retracted.
    retracted: set[str] = set()
    first_five = None
    for event in [e for e in ledger.events("chat-1")
                  if e.type in ("message.appended", "message.retracted")]:
        if event.type == "message.retracted":
            retracted.add(event.data["message_id"])
        counted = sum(1 for e in ledger.events("chat-1", until=event.position)
                      if e.type == "message.appended"
                      and e.data.get("message_id") not in retracted)
        if counted >= 5 and first_five is None:
            first_five = event.position
    expired = next(run for run in report.runs if run.action == "expired")
    assert steps[expired.first - 1].position == first_five
    assert "5 ≥ 5" in expired.numbers and "chat_dialogue ≥ chat_dialogue" in expired.numbers
    # Step 1 is the card (card.set), before any message: a run that holds it counts steps.
    assert (steps[0].event_type, steps[0].message) == ("card.set", 0)
    assert report.line().startswith("mes_example: included at steps 1-")
    # Every step of a run keeps its own numbers: the message count moves within a run.
    for run in report.runs:
        assert [s.step for s in run.steps] == list(range(run.first, run.last + 1))
        for shown in run.steps:
            assert shown.numbers == decision_numbers(
                steps[shown.step - 1].assembly.decision("mes_example"))
    counts = [s.detail["message_count"] for s in report.runs[0].steps]
    assert len(set(counts)) > 1 and "0 < 5 … " in report.line()
    data = json.loads(json.dumps(report.to_json()))
    assert data["runs"][0]["action"] == "included" and data["steps"] == len(steps)
    assert [len(r["steps"]) for r in data["runs"]] == [r.last - r.first + 1
                                                       for r in report.runs]
    assert data["runs"][0]["steps"][1]["numbers"] == report.runs[0].steps[1].numbers


def test_why_resolves_a_message_covered_by_a_range_decision(loaded: Any) -> None:
    ledger, _ = loaded
    report = ledger.why("chat-1", "message:m1")
    steps = ledger.timeline("chat-1")
    assert steps[report.runs[0].first - 1].message_id == "m1"
    assert report.runs[0].first_message == 1 and report.runs[0].covered_by is None
    covered = [run for run in report.runs if run.covered_by is not None]
    assert covered, report.line()
    last = ledger.timeline("chat-1")[-1].assembly
    names = {d.item for d in last.decisions}
    assert "message:m1" not in names
    assert covered[-1].covered_by in names
    assert covered[-1].last == report.steps == len(steps)


def test_why_resolves_a_novel_item_dropped_in_its_tiers_tail(db_url: str) -> None:
    """A novel item dropped in a tier's tail has no decision of its own: ``why`` shows the
    tier's range decision (``cold:dropped``), which lists it."""
    def world(n: int) -> dict[str, Any]:
        return {"type": "item.put", "data": {"item_id": f"w{n}", "kind": "world",
                                             "content": f"World fact number {n}."}}

    def said(text: str) -> dict[str, Any]:
        return {"type": "message.appended", "data": {"role": "user", "content": text}}

    with Ledger.open(db_url) as ledger:
        ledger.append("book", [
            {"type": "session.started", "data": {"scope": "b"}},
            {"type": "setting.changed", "data": {"key": "cold_budget", "value": 20}},
            world(0), world(1), said("one"), world(2), world(3), world(4), said("two"),
            said("three")])
        report = ledger.why("book", "w4", profile="novel")
        last = ledger.timeline("book", profile="novel")[-1].assembly
        assert "w4" not in {d.item for d in last.decisions}
        tail = last.decision("cold:dropped")
        assert tail.covers("w4") and tail.detail["items"][0] == "w4"  # type: ignore[index]
        # Steps: the setting, then each item.put (messages are no input of novel's).
        steps = ledger.timeline("book", profile="novel")
        assert [s.event_type for s in steps] == ["setting.changed"] + ["item.put"] * 5
        assert [(r.first, r.last, r.action, r.reason, r.covered_by) for r in report.runs] \
            == [(6, 6, "dropped", "cold_over_budget", "cold:dropped")]
        assert "limit 20" in report.runs[0].numbers
        assert report.line().startswith("w4: dropped at step 6 via cold:dropped")
        # A kept item still has its own decisions.
        kept = ledger.why("book", "w0", profile="novel")
        assert [(r.action, r.covered_by) for r in kept.runs] == [("included", None)]
    shown = _cli(db_url, "why", "book", "w4", "--profile", "novel", "--format", "text")
    assert shown.exit_code == 0, shown.stderr
    assert "via cold:dropped" in shown.stdout


def test_why_an_unknown_item_is_a_one_line_error(loaded: Any, db_url: str) -> None:
    ledger, _ = loaded
    with pytest.raises(LedgerError, match="'nothing' is not a candidate"):
        ledger.why("chat-1", "nothing")
    one_error_line(_cli(db_url, "why", "chat-1", "message:zzz"), "is not a candidate")
    one_error_line(_cli(db_url, "why", "ghost", "mes_example"), "unknown session 'ghost'")
    shown = _cli(db_url, "why", "chat-1", "mes_example", "--format", "text")
    assert shown.exit_code == 0, shown.stderr
    assert "mes_example: included at steps" in shown.stdout


# -- audit -------------------------------------------------------------------------------------


def _record_three(ledger: Ledger, clock: StepClock) -> None:
    now = clock()
    ledger.record_assembly("chat-1", ledger.assemble("chat-1", "card", now=now))
    ledger.record_assembly("alice-2", ledger.assemble("alice-2", "session", now=now))
    custom = ledger.assemble("chat-1", "card", now=now, policy=CUSTOM)
    ledger.record_assembly("chat-1", custom, policy=CUSTOM)


def test_audit_passes_when_nothing_changed(loaded: Any, db_url: str) -> None:
    ledger, clock = loaded
    _record_three(ledger, clock)
    report = ledger.audit()
    assert [e.status for e in report.entries] == ["match"] * 3 and report.ok
    assert all(e.policy_stored for e in report.entries)
    result = _cli(db_url, "audit")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["counts"]["match"] == 3
    assert _cli(db_url, "audit", "chat-1", "--format", "text").exit_code == 0


def test_audit_fails_on_a_tampered_digest(loaded: Any, db_url: str) -> None:
    ledger, clock = loaded
    _record_three(ledger, clock)
    real = ledger.assemble("chat-1", "card", now=clock())
    forged = real.digest[:-1] + ("0" if real.digest[-1] != "0" else "1")
    ledger.append("chat-1", {"type": "context.assembled", "data": {
        "profile": "card", "policy_version": real.policy_version, "position": real.position,
        "now": real.now.isoformat(), "digest": forged}})
    report = ledger.audit("chat-1")
    assert [e.status for e in report.entries] == ["match", "match", "digest_mismatch"]
    assert not report.ok
    result = _cli(db_url, "audit", "chat-1")
    one_error_line(result, "1 of 3 record(s) do not match")
    assert json.loads(result.stdout)["records"][2]["derived_digest"] == real.digest


def test_audit_derives_a_sessions_records_by_one_fold_as_a_replay_each_would(
        loaded: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Many records of one session (turns apart, a custom policy, a forged digest, one
    from before the session began): one scratch fold per session and profile, and each
    entry is the one a replay of its own gives."""
    from ctxledger.timetravel import _audit, _replay

    ledger, clock = loaded
    for turn in range(4):
        ledger.append("chat-1", {"type": "message.appended",
                                 "data": {"role": "user", "content": f"turn {turn}"}})
        now = clock()
        ledger.record_assembly("chat-1", ledger.assemble("chat-1", "card", now=now))
        if turn % 2:
            custom = ledger.assemble("chat-1", "card", now=now, policy=CUSTOM)
            ledger.record_assembly("chat-1", custom, policy=CUSTOM)
    ledger.record_assembly("chat-1", ledger.assemble("chat-1", "session", now=clock()))
    real = ledger.assemble("chat-1", "card", now=clock())
    for position, digest in ((real.position, real.digest[::-1]), (1, real.digest)):
        ledger.append("chat-1", {"type": "context.assembled", "data": {
            "profile": "card", "policy_version": real.policy_version, "position": position,
            "now": real.now.isoformat(), "digest": digest}})
    folds = []
    made = _replay.ScratchProjections.__init__

    def counted(scratch: Any) -> None:
        folds.append(1)
        made(scratch)

    monkeypatch.setattr(_replay.ScratchProjections, "__init__", counted)
    report = ledger.audit("chat-1")
    # One per profile; the record from before the session is replayed alone, which finds
    # no session and folds nothing.
    assert len(folds) == 2
    with ledger.engine.connect() as conn:
        # No usage was reported, so billing adds only the recorded prediction and limit.
        alone = [_audit._with_billing(_audit.audit_record(conn, record, clock_now=ledger.clock()),
                                      record, None)
                 for record in ledger.events("chat-1") if record.type == "context.assembled"]
    assert report.entries == alone
    assert [e.status for e in report.entries] == ["match"] * 7 + ["digest_mismatch", "error"]


def test_an_old_record_without_its_custom_policy_is_a_policy_mismatch(loaded: Any) -> None:
    ledger, clock = loaded
    custom = ledger.assemble("chat-1", "card", now=clock(), policy=CUSTOM)
    # What record_assembly wrote before the policy field existed.
    ledger.append("chat-1", {"type": "context.assembled", "data": {
        "profile": "card", "policy_version": custom.policy_version,
        "position": custom.position, "now": custom.now.isoformat(),
        "digest": custom.digest}})
    (entry,) = ledger.audit("chat-1").entries
    assert entry.status == "policy_mismatch" and not entry.policy_stored
    assert custom.policy_version in entry.detail


def test_a_record_made_under_an_earlier_card_revision_is_superseded_not_tampered(
        loaded: Any, db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from ctxledger.assembler.profiles.card import CardPolicy

    ledger, clock = loaded
    now = clock()
    with monkeypatch.context() as patched:  # what the previous release made and recorded
        patched.setattr(CardPolicy, "REVISION", CardPolicy.REVISION - 1)
        old = ledger.assemble("chat-1", "card", now=now, policy=CUSTOM)
        ledger.record_assembly("chat-1", old, policy=CUSTOM)
        ledger.record_assembly("chat-1", ledger.assemble("chat-1", "card", now=now))
    current = ledger.assemble("chat-1", "card", now=now, policy=CUSTOM)
    ledger.record_assembly("chat-1", current, policy=CUSTOM)
    # A version that no release made: a mismatch, not an earlier revision.
    ledger.append("chat-1", {"type": "context.assembled", "data": {
        "profile": "card", "policy_version": current.policy_version.replace("@", "@9"),
        "position": current.position, "now": current.now.isoformat(),
        "digest": current.digest}})
    entries = ledger.audit("chat-1").entries
    assert [e.status for e in entries] == [
        "superseded", "superseded", "match", "policy_mismatch"]
    assert old.policy_version.startswith(f"card@{CardPolicy.REVISION - 1}")
    assert old.policy_version in entries[0].detail and "tampering" in entries[0].detail
    assert entries[0].derived_policy_version == current.policy_version
    result = _cli(db_url, "audit", "chat-1")
    one_error_line(result, "3 of 4 record(s) do not match")
    assert json.loads(result.stdout)["counts"]["superseded"] == 2
    text = _cli(db_url, "audit", "chat-1", "--format", "text")
    assert "superseded" in text.stdout and "digest_mismatch" not in text.stdout


def test_what_if_lists_exactly_the_decisions_that_change(loaded: Any, db_url: str,
                                                        tmp_path: Path) -> None:
    ledger, _ = loaded
    report = ledger.what_if("chat-1", CUSTOM)
    expected = []
    for step in ledger.timeline("chat-1"):
        other = ledger.replay("chat-1", until=step.position, policy=CUSTOM)
        was = {d.item: (d.action, d.reason) for d in step.assembly.decisions}
        now = {d.item: (d.action, d.reason) for d in other.decisions}
        for item in sorted(set(was) | set(now)):
            if was.get(item) != now.get(item):
                expected.append((step.message, item))
    assert sorted((c.message, c.item) for c in report.changes) == sorted(expected)
    assert any(c.item == "mes_example" and c.old_action == "expired"
               and c.new_action == "included" for c in report.changes)
    policy_file = str(tmp_path / "policy.json")
    (tmp_path / "policy.json").write_text(json.dumps(CUSTOM))
    result = _cli(db_url, "audit", "chat-1", "--policy", policy_file)
    assert result.exit_code == 0, result.stderr
    assert len(json.loads(result.stdout)["changes"]) == len(report.changes)
    diff = _cli(db_url, "replay", "chat-1", "--diff", policy_file, "--format", "text")
    assert diff.exit_code == 0 and "decision(s) change action and" in diff.stdout


# -- fork --------------------------------------------------------------------------------------


def test_fork_copies_the_prefix_and_assembles_the_same(loaded: Any) -> None:
    ledger, clock = loaded
    original = ledger.events("chat-1")
    # After the scope's last change, so the fork sees the same scope settings.
    cut = next(e for e in original if e.data.get("message_id") == "m7")
    result = ledger.fork("chat-1", "chat-1b", cut.position)
    copies = ledger.events("chat-1b")
    kept = [e for e in original if e.position <= cut.position]
    assert result.stream_version == len(kept) == len(copies)
    for old, new in zip(kept, copies, strict=True):
        assert new.event_id != old.event_id and new.type == old.type
        assert new.metadata["causation_id"] == old.event_id
        assert new.metadata["forked_from"] == "chat-1"
    now = clock() + timedelta(minutes=1)
    fork = ledger.assemble("chat-1b", "card", now=now)
    source = ledger.replay("chat-1", until=cut.position, now=now)
    # The digest covers the session id and position; everything the model sees is equal.
    assert fork.session == "chat-1b" and source.session == "chat-1"
    for part in ("text", "sections", "decisions", "tokens", "report", "policy_version"):
        assert getattr(fork, part) == getattr(source, part), part
    ledger.append("chat-1b", {"type": "message.appended",
                              "data": {"role": "assistant", "content": "A different turn."}})
    assert ledger.assemble("chat-1b", "card", now=now).text != fork.text


def test_bad_forks_write_nothing(loaded: Any, db_url: str) -> None:
    ledger, _ = loaded
    last = ledger.events("chat-1")[-1].position
    head = ledger.head()
    cases = [(("chat-1", "x", last + 1), "beyond session 'chat-1'"),
             (("chat-1", "alice-2", last), "already exists"),
             (("ghost", "x", 5), "unknown session 'ghost'"),
             (("chat-1", "x", 1), "before session 'chat-1' starts"),
             (("scope:alice", "x", 3), "only session streams")]
    for args, needle in cases:
        with pytest.raises(LedgerError, match=needle):
            ledger.fork(*args)
        one_error_line(_cli(db_url, "fork", args[0], args[1], "--at", str(args[2])), needle)
    assert ledger.head() == head
    made = _cli(db_url, "fork", "chat-1", "chat-1c", "--at", str(last))
    assert made.exit_code == 0, made.stderr
    assert json.loads(made.stdout)["forked_from"] == "chat-1"


# -- replay CLI --------------------------------------------------------------------------------


def test_replay_cli_matches_the_api_and_rejects_bad_input(loaded: Any, db_url: str) -> None:
    ledger, _ = loaded
    cut = ledger.head() - 5
    result = _cli(db_url, "replay", "chat-1", "--until", str(cut))
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["digest"] == ledger.replay("chat-1", until=cut).digest
    timeline = _cli(db_url, "replay", "chat-1", "--timeline")
    steps = json.loads(timeline.stdout)
    assert [s["digest"] for s in steps] == [s.assembly.digest
                                            for s in ledger.timeline("chat-1")]
    text = _cli(db_url, "replay", "chat-1", "--timeline", "--format", "text")
    assert text.exit_code == 0 and "timeline chat-1" in text.stdout
    head = ledger.head()
    for args, needle in [
        (("--until", str(head + 10)), "beyond the head"),
        (("--until", "yesterday"), "neither a log position nor an ISO-8601 time"),
        (("--until", "2025-03-01T10:00:00"), "needs a zone"),
        (("--until", "9000-01-01T00:00:00+00:00"), "in the future"),
    ]:
        one_error_line(_cli(db_url, "replay", "chat-1", *args), needle)
    one_error_line(_cli(db_url, "replay", "ghost"), "unknown session 'ghost'")
    assert _cli(db_url, "replay", "chat-1", "--profile", "nope").exit_code == 2
    assert ledger.head() == head
