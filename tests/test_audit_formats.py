"""Audit of records made under another assembly format, on SQLite and PostgreSQL.

An assembly recorded under an older format hashed another form, so its digest cannot be
compared: it gets its own verdict (``older_format``), never a digest mismatch that looks
like tampering, while a current record whose digest differs still is one. Records of
``context.assembled`` v1 (before format 4 they stored no format) read as format 3.
"""

from __future__ import annotations

from typing import Any

from ctxledger import Assembly, Ledger
from ctxledger.assembler.model import REGEX_KEYS_FORMAT, WITHOUT_REGEX_KEYS


def start(ledger: Ledger) -> Assembly:
    ledger.append("chat", [
        {"type": "session.started", "data": {"scope": "s"}},
        {"type": "card.set", "data": {"name": "Mara", "description": "A captain."}},
        {"type": "message.appended", "data": {"role": "user", "content": "Ahoy."}},
        {"type": "message.appended", "data": {"role": "assistant", "content": "Aye."}}])
    return ledger.assemble("chat", "card")


def record(ledger: Ledger, assembly: Assembly, schema_version: int | None = None,
           **changes: Any) -> None:
    data = {"profile": "card", "policy_version": assembly.policy_version,
            "position": assembly.position, "now": assembly.now.isoformat(),
            "digest": assembly.digest, **changes}
    event: dict[str, Any] = {"type": "context.assembled",
                             "data": {k: v for k, v in data.items() if v is not None}}
    if schema_version is not None:
        event["schema_version"] = schema_version
    ledger.append("chat", event)


def test_older_formats_get_their_own_verdict(ledger: Ledger) -> None:
    assembly = start(ledger)
    assert assembly.format_version == WITHOUT_REGEX_KEYS  # no regex key: format 5's form
    ledger.record_assembly("chat", assembly)                       # current: a match
    record(ledger, assembly, digest="0" * 64, format_version=3)     # says format 3
    record(ledger, assembly, schema_version=1, digest="1" * 64)    # an earlier release's
    record(ledger, assembly, digest="2" * 64, format_version=WITHOUT_REGEX_KEYS)  # altered
    record(ledger, assembly, digest="3" * 64)                      # current by default
    record(ledger, assembly, schema_version=1, policy_version="card@2")
    entries = ledger.audit("chat").entries
    assert [e.status for e in entries] == ["match", "older_format", "older_format",
                                           "digest_mismatch", "digest_mismatch",
                                           "older_format"]
    for entry in (entries[1], entries[2], entries[5]):
        assert entry.detail.startswith(
            f"recorded under format 3; current is {WITHOUT_REGEX_KEYS}: ")
        assert "not a sign of tampering" in entry.detail
    assert not ledger.audit("chat").ok
    assert ledger.audit("chat").counts()["older_format"] == 3


def test_a_v1_record_reads_as_format_3(ledger: Ledger) -> None:
    assembly = start(ledger)
    record(ledger, assembly, schema_version=1)
    (event,) = [e for e in ledger.events("chat") if e.type == "context.assembled"]
    assert (event.schema_version, event.data["format_version"]) == (2, 3)


def test_record_assembly_stores_the_format(ledger: Ledger) -> None:
    assembly = start(ledger)
    ledger.record_assembly("chat", assembly)
    (event,) = [e for e in ledger.events("chat") if e.type == "context.assembled"]
    assert event.data["format_version"] == WITHOUT_REGEX_KEYS


def test_records_of_regex_keys_before_re2_are_an_older_format(ledger: Ledger) -> None:
    # Format 6 reads regex keys with RE2: a format-5 record of a card with one hashed
    # what the earlier engine decided, so it cannot be compared; a card without one
    # still matches its format-5 record.
    plain = start(ledger)
    ledger.record_assembly("chat", plain)
    book = {"entries": [{"keys": ["/(?<=sir )knight/"], "use_regex": True,
                         "content": "Knights."}]}
    ledger.append("chat", {"type": "card.set", "data": {"character_book": book}})
    current = ledger.assemble("chat", "card")
    assert current.format_version == REGEX_KEYS_FORMAT == 6
    ledger.record_assembly("chat", current)
    record(ledger, current, digest="4" * 64, format_version=WITHOUT_REGEX_KEYS)
    record(ledger, current, digest="5" * 64, format_version=REGEX_KEYS_FORMAT)  # altered
    entries = ledger.audit("chat").entries
    assert [e.status for e in entries] == ["match", "match", "older_format",
                                           "digest_mismatch"]
    assert entries[2].detail.startswith("recorded under format 5; current is 6: ")
