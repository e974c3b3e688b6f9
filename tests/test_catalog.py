"""The event catalog: every type accepts a minimal payload and rejects malformed ones.

``EXAMPLES`` holds one row per catalog type. A type added to ``store.catalog.CATALOG``
without a row here fails ``test_every_catalog_type_has_an_example``, so the table stays
complete.

The tests share one ledger per backend (validation is what is tested, and "nothing
written" is checked by comparing the whole log and every projection row); each test
writes to streams of its own.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from helpers.assertions import ledger_state, one_line
from helpers.databases import module_database

from ctxledger import EventValidationError, Ledger
from ctxledger.store.catalog import CATALOG
from ctxledger.store.streams import stream_kind


@dataclass(frozen=True)
class Example:
    """How to exercise one event type."""

    stream: str
    """A stream of a kind the type belongs in."""
    valid: dict[str, Any]
    """A minimal valid payload."""
    wrong_type: dict[str, Any]
    """A field with a value of the wrong type (merged over ``valid``)."""
    wrong_stream: str
    """A stream of a kind the type does not belong in."""
    required: str | None = None
    """A required field to drop from ``valid`` (None when every field is optional)."""


DIGEST = "ab" * 32
EXAMPLES: dict[str, Example] = {
    "session.started": Example("chat", {}, {"scope": 5}, "scope:alice"),
    "session.ended": Example("chat", {}, {"summary": ["not", "text"]}, "system"),
    "message.appended": Example(
        "chat", {"role": "user", "content": "hi"}, {"content": 42}, "scope:alice", "content"),
    "message.retracted": Example(
        "chat", {"message_id": "m1"}, {"message_id": 1}, "scope:alice", "message_id"),
    "history.summarized": Example(
        "chat", {"through_message_id": "m1", "summary": "s"}, {"summary": 3}, "scope:alice",
        "summary"),
    "tool.used": Example(
        "chat", {"tool_name": "grep"}, {"tool_name": 7}, "scope:alice", "tool_name"),
    "setting.changed": Example(
        "scope:alice", {"key": "k", "value": 1}, {"key": 1}, "system", "key"),
    "card.set": Example("chat", {}, {"tags": "not-a-list"}, "system"),
    "lorebook.set": Example(
        "scope:alice", {"book_id": "world", "book": {"entries": []}},
        {"book": {"entries": [{"content": 3}]}}, "chat", "book"),
    "lorebook.removed": Example("scope:alice", {"book_id": "world"}, {"book_id": 1}, "chat",
                                "book_id"),
    "chapter.moved": Example("chat", {"chapter": 1}, {"chapter": "one"}, "scope:alice",
                             "chapter"),
    "item.put": Example(
        "chat", {"item_id": "i1", "kind": "world", "content": "c"}, {"content": 1},
        "scope:alice", "kind"),
    "item.removed": Example("chat", {"item_id": "i1"}, {"item_id": 1}, "system", "item_id"),
    "observation.recorded": Example(
        "chat", {"kind": "finding", "content": "c"}, {"content": ["a"]}, "scope:alice",
        "content"),
    "document.put": Example(
        "chat", {"doc_id": "d", "kind": "text", "content": "c"}, {"content": 5},
        "scope:alice", "doc_id"),
    "tool.registered": Example(
        "scope:alice", {"name": "grep", "tool_type": "builtin"}, {"name": 1}, "chat",
        "tool_type"),
    "tool.removed": Example("scope:alice", {"name": "grep"}, {"name": 1}, "chat", "name"),
    "source.registered": Example(
        "scope:alice", {"source_id": "s", "version": "1", "trust": 0.5}, {"trust": "high"},
        "chat", "trust"),
    "snippet.added": Example(
        "scope:alice", {"snippet_id": "sn", "source_id": "s", "source_version": "1",
                        "text": "t"},
        {"entities": "e"}, "chat", "text"),
    "entity.put": Example(
        "scope:alice", {"entity_id": "e", "name": "E"}, {"facts": "x"}, "chat", "name"),
    "persona.set": Example(
        "chat", {"agent_id": "a"}, {"knowledge_scope": 3}, "scope:alice", "agent_id"),
    "context.assembled": Example(
        "chat", {"profile": "card", "policy_version": "1", "position": 0,
                 "now": "2026-03-01T12:00:00Z", "digest": DIGEST},
        {"position": "zero"}, "scope:alice", "digest"),
    "usage.reported": Example(
        "chat", {"model": "gpt-4o", "input_tokens": 10, "output_tokens": 2},
        {"input_tokens": "ten"}, "scope:alice", "model"),
    "rollup.completed": Example(
        "system", {"day": "2026-03-01", "rows": 0, "digest": "d"}, {"rows": "many"}, "chat",
        "day"),
    "checkpoint.saved": Example(
        "langgraph:t1", {"checkpoint_id": "c1", "checkpoint": {"v": {"json": 1}},
                         "metadata": {"json": {}}},
        {"checkpoint_id": 7}, "scope:alice", "checkpoint"),
    "checkpoint.written": Example(
        "langgraph:t1", {"checkpoint_id": "c1", "task_id": "t",
                         "writes": [{"idx": 0, "channel": "a", "value": {"json": 1}}]},
        {"writes": "none"}, "system", "writes"),
    "checkpoints.cleared": Example("langgraph:t1", {}, {"run_ids": "r1"}, "scope:alice"),
}


def test_every_catalog_type_has_an_example() -> None:
    assert sorted(EXAMPLES) == sorted(CATALOG)


def test_examples_use_the_declared_stream_kinds() -> None:
    """The table itself is right: valid streams allowed, wrong streams not."""
    for name, example in EXAMPLES.items():
        kinds = CATALOG[name].stream_kinds
        assert stream_kind(example.stream) in kinds, name
        assert stream_kind(example.wrong_stream) not in kinds, name


@pytest.fixture(scope="module",
                params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def ledger(request: pytest.FixtureRequest,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[Ledger]:
    """One ledger per backend for the whole module."""
    with (module_database(request.param, tmp_path_factory.mktemp("catalog")) as url,
          Ledger.open(url) as opened):
        yield opened


def own_stream(stream: str, owner: str) -> str:
    """A stream of the same kind as ``stream`` that only ``owner`` writes to."""
    return stream if stream_kind(stream) == "system" else f"{stream}~{owner}"


def rejects(ledger: Ledger, stream: str, event: dict[str, Any], *fragments: str) -> None:
    """Appending ``event`` fails with a one-line message naming each fragment; no writes."""
    before = ledger_state(ledger)
    with pytest.raises(EventValidationError) as err:
        ledger.append(stream, [event])
    text = one_line(err.value)
    for fragment in fragments:
        assert fragment in text, f"{fragment!r} not in {text!r}"
    assert ledger_state(ledger) == before


@pytest.mark.parametrize("type_name", sorted(EXAMPLES))
def test_type_accepts_minimal_payload_and_rejects_bad_ones(ledger: Ledger,
                                                           type_name: str) -> None:
    example = EXAMPLES[type_name]
    stream = own_stream(example.stream, type_name)
    # A session stream gets its start first, as an application would write it.
    if stream_kind(stream) == "session" and type_name != "session.started":
        ledger.append(stream, {"type": "session.started", "data": {}})
    if type_name in ("message.retracted", "history.summarized"):
        # The store refuses a retraction or summary of a message the stream lacks.
        ledger.append(stream, {"type": "message.appended",
                               "data": {"role": "user", "content": "x", "message_id": "m1"}})
    head = ledger.head()

    result = ledger.append(stream, {"type": type_name, "data": example.valid})
    assert result.positions == (head + 1,)
    (stored,) = ledger.events(after=head)
    assert (stored.type, stored.stream_id) == (type_name, stream)
    assert stored.schema_version == CATALOG[type_name].schema_version
    # Fields given come back as given; only declared defaults may be added.
    assert {k: stored.data[k] for k in example.valid} == example.valid
    assert set(stored.data) <= set(CATALOG[type_name].model_fields)

    if example.required is not None:
        missing = {k: v for k, v in example.valid.items() if k != example.required}
        rejects(ledger, stream, {"type": type_name, "data": missing},
                type_name, example.required)
    (field,) = example.wrong_type
    rejects(ledger, stream,
            {"type": type_name, "data": {**example.valid, **example.wrong_type}},
            type_name, field)
    rejects(ledger, stream,
            {"type": type_name, "data": {**example.valid, "bogus_field": 1}},
            type_name, "bogus_field")
    wrong = own_stream(example.wrong_stream, type_name)
    rejects(ledger, wrong, {"type": type_name, "data": example.valid},
            type_name, repr(wrong))


@pytest.mark.parametrize("type_name", ["tool.used.v2", "message", "Message.Appended", "x"])
def test_unknown_type_is_rejected(ledger: Ledger, type_name: str) -> None:
    rejects(ledger, "chat", {"type": type_name, "data": {}}, "unknown event type",
            repr(type_name))


def test_tool_registered_in_a_session_stream_names_the_kinds(ledger: Ledger) -> None:
    rejects(ledger, "chat-1", {"type": "tool.registered",
                               "data": {"name": "grep", "tool_type": "builtin"}},
            "tool.registered belongs in a scope stream", "session stream 'chat-1'")


@pytest.mark.parametrize(("type_name", "data", "fragment"), [
    ("message.appended", {"role": "narrator", "content": "x"}, "role"),
    ("chapter.moved", {"chapter": 0}, "chapter"),
    ("source.registered", {"source_id": "s", "version": "1", "trust": 1.5}, "trust"),
    ("context.assembled", {"profile": "card", "policy_version": "1", "position": -1,
                           "now": "n", "digest": DIGEST}, "position"),
    ("context.assembled", {"profile": "card", "policy_version": "1", "position": 0,
                           "now": "n", "digest": "XYZ"}, "digest"),
    ("message.retracted", {"message_id": ""}, "message_id"),
    ("entity.put", {"entity_id": "e", "name": "E", "facts": [{"text": "t", "x": 1}]},
     "facts"),
])
def test_values_out_of_range_are_rejected(ledger: Ledger, type_name: str,
                                          data: dict[str, Any], fragment: str) -> None:
    stream = EXAMPLES[type_name].stream
    rejects(ledger, stream, {"type": type_name, "data": data}, type_name, fragment)


def test_many_errors_stay_on_one_line(ledger: Ledger) -> None:
    # (An unknown key would be named alone, first: store.chat_shapes refuses it.)
    data = {"role": 1, "content": 2, "name": 3, "message_id": 4, "tool_call_id": 5}
    rejects(ledger, "chat", {"type": "message.appended", "data": data}, "more")


def test_unset_optional_fields_are_not_stored_but_explicit_nulls_are(ledger: Ledger) -> None:
    ledger.append("optional-fields", [
        {"type": "session.started", "data": {}},
        {"type": "message.appended", "data": {"role": "user", "content": "a"}},
        {"type": "message.appended", "data": {"role": "user", "content": "b", "name": None}},
    ])
    started, plain, explicit = ledger.events("optional-fields")
    assert started.data == {"scope": "default"}
    assert plain.data == {"role": "user", "content": "a"}
    assert explicit.data == {"role": "user", "content": "b", "name": None}
