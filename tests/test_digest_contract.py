"""What an assembly's digest covers: only what was decided and sent, in one form.

- The digest is a function of (log prefix, now, policy): never of cache or memo state.
- Every datetime in the output has one form (``store.clock.format_utc``).
- ``format_version`` is part of the hashed output.
- Ordering never comes from the database: the same log gives the same digests on SQLite
  and PostgreSQL (text sorts by collation on one and by bytes on the other).
- The example sessions' digests are pinned: a change to any of them is deliberate.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
import sqlalchemy as sa

from ctxledger import Ledger
from ctxledger._demo import load_and_assemble_examples
from ctxledger.assembler.digest import canonical_payload, compute_digest
from ctxledger.assembler.model import FORMAT_VERSION
from ctxledger.projections.view import ViewRequest

NOW = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
UTC_FORM = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")
ANY_DATETIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d")

GOLDEN = {
    "brief.jsonl": "40b9da08c6f16492ccdf5df3ff345ea33f50d20fa64d28957265bdb7520cbe6c",
    "card.jsonl": "1771810a49cecb95af4987013804d5d65b82a9c90630eb6d279c47024d59b5d5",
    "session.jsonl": "6127e75f82ecb6ad42afa32ba198d14d940396f210a78f850a37777b205d2e89",
    "novel.jsonl": "42447339fa323a674f7bc6755dabfa3a06ad8eae4d99c6bfa125742f9d9916c2",
}
"""Digests of the example assemblies (``ctxledger demo``), pinned. When one changes on
purpose, bump ``FORMAT_VERSION`` if what is hashed changed, and update README and here."""

CARD_AT_REVISION_1 = "93f8c56bf49656867682040525c684d4099f6cc00a254b5f5324b44c903e9a80"
"""The card example's digest under ``card@1``. Its window is not on a boundary that the
exact line-break count moves, so ``card@2`` decides and sends the same: only the policy
version it names (which is hashed) differs."""


def strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield from strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from strings(item)


def test_every_datetime_has_one_form(ledger: Ledger) -> None:
    ledger.append("s1", [{"type": "session.started", "data": {"scope": "p"}},
                         {"type": "message.appended", "data": {"role": "user",
                                                               "content": "hi"}}])
    ledger.append("scope:p", [{"type": "tool.registered",
                               "data": {"name": "lint", "tool_type": "slash_command"}}])
    ledger.append("s1", {"type": "tool.used", "data": {"tool_name": "lint"}})
    for profile in ("card", "session"):
        dumped = json.loads(canonical_payload(ledger.assemble("s1", profile, now=NOW)))
        stamps = [s for s in strings(dumped) if ANY_DATETIME.match(s)]
        assert stamps, profile
        assert all(UTC_FORM.match(stamp) for stamp in stamps), stamps


def test_format_version_is_hashed(ledger: Ledger) -> None:
    ledger.append("s1", {"type": "session.started", "data": {}})
    assembly = ledger.assemble("s1", "card", now=NOW)
    assert assembly.format_version == FORMAT_VERSION
    assert f'"format_version":{FORMAT_VERSION}' in canonical_payload(assembly)
    bumped = assembly.model_copy(update={"format_version": FORMAT_VERSION + 1})
    assert compute_digest(bumped) != assembly.digest


def test_caches_never_change_the_digest(db_url: str) -> None:
    with Ledger.open(db_url) as ledger:
        ledger.append("chat", [
            {"type": "session.started", "data": {}},
            {"type": "setting.changed", "data": {"key": "compression_level",
                                                 "value": "chat_only"}},
            *({"type": "message.appended", "data": {"message_id": f"m{i}", "role": "user",
                                                    "content": f"line {i}"}}
              for i in range(1, 30)),
            {"type": "history.summarized", "data": {"through_message_id": "m20",
                                                    "summary": "Earlier lines."}}])
        cold = ledger.assemble("chat", "card", now=NOW)  # writes the memo and counts
        warm = ledger.assemble("chat", "card", now=NOW)  # reads them
        ledger.append("chat", {"type": "message.retracted", "data": {"message_id": "m3"}})
        after_retraction = ledger.assemble("chat", "card", now=NOW)  # memo now stale
        with ledger.log.transaction() as conn:
            conn.execute(sa.text("DELETE FROM history_token_memo"))
            conn.execute(sa.text("DELETE FROM token_counts"))
    assert warm.digest == cold.digest
    with Ledger.open(db_url) as reopened:  # empty caches, a new process's memo
        assert reopened.assemble("chat", "card", now=NOW).digest == after_retraction.digest


def test_database_order_never_leaks_into_the_output(sqlite_url: str, pg_url: str) -> None:
    names = ["zeta", "Alpha", "_beta", "beta", "Ärger", "éclair", "a-b", "a_b", "B"]
    digests = []
    for url in (sqlite_url, pg_url):
        with Ledger.open(url) as ledger:
            ledger.append("s1", {"type": "session.started", "data": {"scope": "p"}})
            ledger.append("scope:p", [
                {"type": "tool.registered", "data": {"name": name, "tool_type": "skill",
                                                     "description": f"does {name}"}}
                for name in names])
            ledger.append("s1", [{"type": "card.set", "data": {
                "name": "Q", "description": "d", "scenario": "s", "system_prompt": "p"}}])
            for profile in ("card", "session"):
                digests.append(ledger.assemble("s1", profile, now=NOW).digest)
            view = ledger.view("s1", ViewRequest(tools=True))
            # Code-point order, as Python sorts, whatever the database's collation.
            assert [tool.name for tool in view.tools] == sorted(names)
    assert digests[:2] == digests[2:]


@pytest.mark.postgres
def test_the_examples_give_the_pinned_digests_on_both_backends(sqlite_url: str,
                                                                pg_url: str) -> None:
    on_sqlite = load_and_assemble_examples(sqlite_url)
    on_postgres = load_and_assemble_examples(pg_url)
    assert sorted(on_sqlite) == sorted(GOLDEN)
    for name, (session, assembly) in on_sqlite.items():
        other_session, other = on_postgres[name]
        assert (session, other.digest) == (other_session, assembly.digest), name
        assert other.model_dump() == assembly.model_dump(), name
    assert {name: found[1].digest for name, found in on_sqlite.items()} == GOLDEN


def test_the_card_example_decides_the_same_under_card_2_as_under_card_1(
        sqlite_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from ctxledger.assembler.profiles.card import CardPolicy

    now = load_and_assemble_examples(sqlite_url)["card.jsonl"][1]
    assert now.policy_version.startswith("card@2+")
    monkeypatch.setattr(CardPolicy, "REVISION", 1)
    with Ledger.open(sqlite_url) as ledger:
        before = ledger.assemble(now.session, "card", now=now.now)
    assert before.policy_version == now.policy_version.replace("card@2", "card@1")
    assert before.digest == CARD_AT_REVISION_1
    assert before.text == now.text and before.decisions == now.decisions
