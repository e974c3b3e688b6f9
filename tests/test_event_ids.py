"""Generated event ids are UUIDv7 and rise (so the ``event_id`` index is written at
its right edge)."""

from __future__ import annotations

import uuid

from ctxledger import Ledger
from ctxledger.store.validate import new_event_id


def test_generated_ids_are_version_7_and_rise() -> None:
    ids = [new_event_id() for _ in range(5_000)]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    for text in ids[:50]:
        parsed = uuid.UUID(text)
        assert (parsed.version, parsed.variant, str(parsed)) == (7, uuid.RFC_4122, text)


def test_appended_events_get_rising_v7_ids(sqlite_url: str) -> None:
    with Ledger.open(sqlite_url, load_vocabulary=False) as ledger:
        ledger.append("s", [{"type": "message.appended",
                             "data": {"role": "user", "content": f"m{i}"}} for i in range(20)])
        ids = [e.event_id for e in ledger.events("s")]
    assert ids == sorted(ids) and {uuid.UUID(i).version for i in ids} == {7}
