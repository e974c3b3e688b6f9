"""``why`` and ``replay --timeline`` on the CLI: steps on each input event of the profile,
the session's ``profile`` setting as the default profile, every step's numbers; and
``assemble --agent`` naming the profile it resolved. SQLite and PostgreSQL."""

from __future__ import annotations

import json
from typing import Any

from typer.testing import CliRunner, Result

from ctxledger import Ledger
from ctxledger._config import ENV_VAR
from ctxledger.cli import app
from ctxledger.cli._errors import DEBUG_ENV_VAR


def _cli(db_url: str, *args: str) -> Result:
    runner = CliRunner(env={ENV_VAR: None, DEBUG_ENV_VAR: None, "COLUMNS": "200"})
    return runner.invoke(app, ["--db", db_url, *args])


def _summary(chapter: int) -> dict[str, Any]:
    return {"type": "item.put", "data": {
        "item_id": f"sum-ch{chapter:02d}", "kind": "summary", "chapter": chapter,
        "content": f"Chapter {chapter}: the crew " + "sails on " * 6 + "."}}


def _book(db_url: str) -> list[int]:
    """A novel session with a 'profile' setting, items and chapter moves, no message."""
    with Ledger.open(db_url) as ledger:
        return ledger.append("book", [
            {"type": "session.started", "data": {"scope": "b"}},
            {"type": "setting.changed", "data": {"key": "profile", "value": "novel"}},
            {"type": "chapter.moved", "data": {"chapter": 3}},
            *(_summary(n) for n in range(1, 6)),
            {"type": "chapter.moved", "data": {"chapter": 6}},
            {"type": "item.removed", "data": {"item_id": "sum-ch01"}},
            {"type": "chapter.moved", "data": {"chapter": 9}}]).positions


def test_why_follows_a_novel_item_through_puts_and_moves_by_default(db_url: str) -> None:
    positions = _book(db_url)
    result = _cli(db_url, "why", "book", "sum-ch05")
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["profile"] == "novel" and report["messages"] == 0
    # Steps: the setting, three chapter moves, five puts, one removal.
    assert report["steps"] == 10
    steps = [step for run in report["runs"] for step in run["steps"]]
    assert [s["step"] for s in steps] == list(range(7, 11))  # from its put on
    assert steps[0]["event_type"] == "item.put" and steps[0]["position"] == positions[7]
    # Each step's decision is the live assembly's at that position and time.
    with Ledger.open(db_url) as ledger:
        for step in steps:
            event = ledger.events("book", until=step["position"])[-1]
            live = ledger.replay("book", until=step["position"], profile="novel",
                                 now=event.recorded_at)
            decision = live.decision("sum-ch05")
            run = next(r for r in report["runs"] if r["first"] <= step["step"] <= r["last"])
            assert (run["action"], run["reason"]) == (decision.action, decision.reason)
    # --profile still wins over the setting.
    card = _cli(db_url, "why", "book", "sum-ch05", "--profile", "card")
    assert card.exit_code == 1 and "is not a candidate" in card.stderr


def test_timeline_steps_on_the_novels_inputs_with_the_new_keys(db_url: str) -> None:
    positions = _book(db_url)
    result = _cli(db_url, "replay", "book", "--timeline")
    assert result.exit_code == 0, result.stderr
    steps = json.loads(result.stdout)
    assert [s["position"] for s in steps] == list(positions[1:])
    assert [s["event_type"] for s in steps] == (
        ["setting.changed", "chapter.moved"] + ["item.put"] * 5
        + ["chapter.moved", "item.removed", "chapter.moved"])
    assert [s["step"] for s in steps] == list(range(1, 11))
    assert {s["stream_id"] for s in steps} == {"book"}
    assert all(s["message_id"] is None and s["message"] == 0 for s in steps)
    text = _cli(db_url, "replay", "book", "--timeline", "--format", "text")
    assert text.exit_code == 0 and "timeline book (novel)" in text.stdout
    assert "item.removed" in text.stdout


def test_why_text_shows_every_steps_numbers(db_url: str) -> None:
    with Ledger.open(db_url) as ledger:
        ledger.append("chat", [
            {"type": "session.started", "data": {"scope": "c"}},
            {"type": "card.set", "data": {"name": "Mara", "mes_example": "Mara: Aye."}},
            {"type": "setting.changed", "data": {"key": "compression_level",
                                                 "value": "chat_dialogue"}},
            *({"type": "message.appended", "data": {"role": "user", "content": f"hi {i}"}}
              for i in range(4))])
    result = _cli(db_url, "why", "chat", "mes_example", "--format", "text")
    assert result.exit_code == 0, result.stderr
    # Step 1 (the card) is under the default level; then one run over five steps, each
    # step's count on its own row.
    for count in range(5):
        assert f"chat_dialogue, {count} < 5" in result.stdout
    assert "; included at steps 2-6 (level chat_dialogue ≥ chat_dialogue, 0 < 5 … " \
        in result.stdout


def test_assemble_with_an_agent_names_the_profile_it_resolved(db_url: str) -> None:
    _book(db_url)
    result = _cli(db_url, "assemble", "book", "--agent", "executor", "--format", "text")
    assert result.exit_code == 0, result.stderr
    assert result.stdout.splitlines()[0] == \
        "profile novel (from the session's profile setting)"
    assert "[ctxledger - Agent state: executor]" in result.stdout
    with Ledger.open(db_url) as ledger:
        ledger.append("bare", {"type": "session.started", "data": {"scope": "b"}})
    bare = _cli(db_url, "assemble", "bare", "--agent", "executor")
    assert bare.exit_code == 2 and "None" not in bare.stderr
    assert "the session has no 'profile' setting" in bare.stderr


def test_timeline_json_is_written_a_step_at_a_time_byte_for_byte(db_url: str) -> None:
    """``--format json`` streams the very bytes of the whole array; ``jsonl`` gives one
    record per line as each step is computed, the same records."""
    from ctxledger import render
    from ctxledger.render._replay import timeline_records

    _book(db_url)
    with Ledger.open(db_url) as ledger:
        steps = ledger.timeline("book", profile="novel")
    records = list(timeline_records(steps))
    # ``changed``: each step's decisions that differ from the step before's.
    for before, after, record in zip([None, *steps], steps, records, strict=False):
        old = {d.item: (d.action, d.reason) for d in before.assembly.decisions} \
            if before is not None else {}
        new = {d.item: (d.action, d.reason) for d in after.assembly.decisions}
        assert {c["item"] for c in record["changed"]} == {
            item for item in old.keys() | new.keys() if old.get(item) != new.get(item)}
    assert any(c["action"] == "absent" for r in records for c in r["changed"])
    array = _cli(db_url, "replay", "book", "--timeline")
    assert array.exit_code == 0, array.stderr
    assert array.stdout == render.dumps(records, indent=2) + "\n"
    lines = _cli(db_url, "replay", "book", "--timeline", "--format", "jsonl")
    assert lines.exit_code == 0, lines.stderr
    assert [json.loads(line) for line in lines.stdout.splitlines()] == records
    empty = _cli(db_url, "replay", "book", "--timeline", "--until", "1")
    assert (empty.exit_code, empty.stdout) == (0, "[]\n")
    single = _cli(db_url, "replay", "book", "--format", "jsonl")
    assert single.exit_code == 0 and len(single.stdout.splitlines()) == 1
    assert json.loads(single.stdout)["profile"] == "novel"
