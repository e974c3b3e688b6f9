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
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxledger import Ledger
from ctxledger._demo import load_and_assemble_examples
from ctxledger.assembler.digest import canonical_payload, compute_digest, messages_json
from ctxledger.assembler.model import (
    FORMAT_VERSION,
    REGEX_KEYS_FORMAT,
    WITHOUT_REGEX_KEYS,
    ContextMessage,
)
from ctxledger.projections.session_view import ViewRequest
from ctxledger.store.canonical import canonical_json

NOW = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
UTC_FORM = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")
ANY_DATETIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d")

GOLDEN = {
    "brief.jsonl": "c73e175e05de7e27037692672be855174e7546561615d6a1280d2dbd132ffbb8",
    "card.jsonl": "c1172588a953646ef2cca1282c01d530fe88c5ba9485ce6c969b61fc41f07bde",
    "lorebook.jsonl": "ed882dca0b312bad2a7ac203e155d1288f0f313a28279773652e4aaf819a5287",
    "novel.jsonl": "a788bee08252ca343c3951b94b38589838fad9beb352c7fb758952136d702472",
    "session.jsonl": "b8366ddd216e0ce819d3c430029efa7302778ed55c7cdddf1c9de14ce2eb79c2",
    "tools.jsonl": "cbaa774da1989648989c0c618e63f13474408df5e8f24a7d1aa8e343c9810996",
}
"""Digests of the example assemblies (``ctxledger demo``), pinned. When one changes on
purpose, bump ``FORMAT_VERSION`` if what is hashed changed, and update README and here."""

PREVIOUS_REVISIONS = {"card": 4, "session": 2}
"""The profile revisions before lengths were counted in the app's unit."""
PREVIOUS_GOLDEN = {
    "card.jsonl": "7bc9a9a6a016a33377a048168aaab88192171bb0ac5b3f9a1e1b43c2ddd6f1d3",
    "lorebook.jsonl": "b71bdf6ec70af35a526d477d81aff54d2acfc99d8171387e8b79295aa71248fd",
    "session.jsonl": "68061019864a3d0e66b137105a7730b5823409111ddb9822fa851334cc8dd77d",
    "tools.jsonl": "7a221fdd36ff9dc80c848898db6df580ee2006210f725394e5034a7d51f76ea4",
}
"""What those revisions pinned: the examples hold no text outside the BMP, so under the
old revision numbers they hash exactly as before (only ``policy_version`` moved)."""

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
    assert assembly.format_version == WITHOUT_REGEX_KEYS
    assert f'"format_version":{WITHOUT_REGEX_KEYS}' in canonical_payload(assembly)
    bumped = assembly.model_copy(update={"format_version": FORMAT_VERSION})
    assert compute_digest(bumped) != assembly.digest


def test_only_an_assembly_with_regex_keys_is_the_newest_format(ledger: Ledger) -> None:
    # RE2 reads regex keys since format 6; any other assembly hashes what 5 did.
    book = {"entries": [{"keys": ["dragon"], "content": "Dragons."}]}
    ledger.append("s1", [{"type": "session.started", "data": {}},
                         {"type": "card.set", "data": {"name": "Q", "character_book": book}},
                         {"type": "message.appended", "data": {"role": "user",
                                                               "content": "a dragon"}}])
    assert ledger.assemble("s1", "card", now=NOW).format_version == WITHOUT_REGEX_KEYS
    regex_book = {"entries": [{"keys": ["/drag(on)?/i"], "use_regex": True,
                               "content": "Dragons."}]}
    ledger.append("s1", {"type": "card.set", "data": {"character_book": regex_book}})
    assembly = ledger.assemble("s1", "card", now=NOW)
    assert assembly.format_version == REGEX_KEYS_FORMAT == 6
    assert f'"format_version":{REGEX_KEYS_FORMAT}' in canonical_payload(assembly)


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


def test_only_the_revision_moved_the_examples_digests(
        sqlite_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from ctxledger.assembler.profiles.card import CardPolicy
    from ctxledger.assembler.profiles.session import SessionPolicy

    monkeypatch.setattr(CardPolicy, "REVISION", PREVIOUS_REVISIONS["card"])
    monkeypatch.setattr(SessionPolicy, "REVISION", PREVIOUS_REVISIONS["session"])
    found = {name: assembly.digest
             for name, (_, assembly) in load_and_assemble_examples(sqlite_url).items()}
    assert found == {**GOLDEN, **PREVIOUS_GOLDEN}


def test_the_digest_covers_the_messages(sqlite_url: str) -> None:
    _, assembly = load_and_assemble_examples(sqlite_url)["tools.jsonl"]
    payload = json.loads(canonical_payload(assembly))
    assert payload["format_version"] == WITHOUT_REGEX_KEYS == 5
    assert payload["messages"] == [m.model_dump(mode="json") for m in assembly.messages]
    calls = next(i for i, m in enumerate(assembly.messages) if m.tool_calls)
    # A message that would be sent otherwise, with the text unchanged, is another digest.
    renamed = list(assembly.messages)
    renamed[calls] = renamed[calls].model_copy(update={"name": "someone"})
    assert compute_digest(assembly.model_copy(update={"messages": renamed})) \
        != assembly.digest
    assert compute_digest(assembly) == assembly.digest


@settings(max_examples=200, deadline=None)
@given(texts=st.lists(st.text(), min_size=1, max_size=4), name=st.none() | st.text(),
       tokens=st.integers(0, 2**40))
def test_the_messages_fast_path_writes_the_reference_bytes(texts: list[str],
                                                           name: str | None,
                                                           tokens: int) -> None:
    # Any text (nulls, "e-7", "null", surrogates...), names and counts: the messages'
    # JSON straight from orjson is the reference form's.
    messages = [ContextMessage(role="user", content=text, name=name, sections=["s"],
                               tokens=tokens) for text in texts]
    assert messages_json(messages) == canonical_json(
        [message.model_dump(mode="json") for message in messages])
