"""A fuzz corpus of bad (and borderline) input, run through the CLI on SQLite and PostgreSQL.

Every case is ``ctxledger append STREAM`` with raw JSONL bytes, run against one SQLite and
one PostgreSQL database that have seen exactly the same cases before it. For each case:
the exit code is 0 or 1; a failure is one ``error: `` line on stderr with no traceback and
no "internal error", and leaves the event count unchanged; and both backends give the
same verdict, word for word (and the same positions on success).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from helpers.databases import module_database
from typer.testing import CliRunner, Result

from ctxledger import Ledger
from ctxledger.cli import app

pytestmark = pytest.mark.postgres


@dataclass(frozen=True)
class Case:
    """One CLI append: the stream argument, the raw input, and extra arguments."""

    name: str
    stream: str
    payload: bytes
    args: tuple[str, ...] = ()


def line(event: Any) -> bytes:
    """One JSONL line; lone surrogates are written as JSON escapes, like any client would."""
    return json.dumps(event, ensure_ascii=True).encode() + b"\n"


def lines(*events: Any) -> bytes:
    """Several JSONL lines."""
    return b"".join(line(e) for e in events)


def message(content: Any = "hi", **extra: Any) -> dict[str, Any]:
    """A ``message.appended`` input."""
    return {"type": "message.appended", "data": {"role": "user", "content": content, **extra}}


DIGEST = "ab" * 32
# A minimal valid payload of every type, and the stream kind it belongs in.
VALID: dict[str, tuple[str, dict[str, Any]]] = {
    "session.started": ("session", {"scope": "s", "title": "t"}),
    "session.ended": ("session", {"summary": "done"}),
    "message.appended": ("session", {"role": "user", "content": "hi", "message_id": "m1"}),
    "tool.used": ("session", {"tool_name": "grep", "ok": True}),
    "setting.changed": ("scope", {"key": "k", "value": 1}),
    "card.set": ("session", {"name": "Ava", "tags": ["a"]}),
    "chapter.moved": ("session", {"chapter": 2, "scene": "x"}),
    "item.put": ("session", {"item_id": "i", "kind": "world", "content": "c", "chapter": 1,
                             "active": True}),
    "item.removed": ("session", {"item_id": "i"}),
    "observation.recorded": ("session", {"kind": "finding", "content": "c"}),
    "document.put": ("session", {"doc_id": "d", "kind": "text", "content": "c"}),
    "tool.registered": ("scope", {"name": "grep", "tool_type": "builtin"}),
    "tool.removed": ("scope", {"name": "grep"}),
    "source.registered": ("scope", {"source_id": "src", "version": "1", "trust": 0.5}),
    "snippet.added": ("scope", {"snippet_id": "n", "source_id": "src", "source_version": "1",
                                "text": "t", "entities": ["e"]}),
    "entity.put": ("scope", {"entity_id": "e", "name": "E",
                             "facts": [{"text": "f", "critical": True}]}),
    "persona.set": ("session", {"agent_id": "a", "knowledge_scope": ["e"]}),
    "context.assembled": ("session", {"profile": "card", "policy_version": "1",
                                      "position": 1, "now": "2026-01-01T00:00:00Z",
                                      "digest": DIGEST, "tokens": 5}),
    "rollup.completed": ("system", {"day": "2026-01-02", "rows": 1, "digest": "d"}),
}
# Values of every JSON kind, plus the coercions strict validation must refuse.
WRONG = (True, "3", 2.5, None, [])


def stream_for(kind: str, n: int) -> str:
    return {"session": f"fz-{n}", "scope": f"scope:fz-{n}", "system": "system"}[kind]


def build_corpus() -> list[Case]:
    cases: list[Case] = []

    def add(name: str, payload: bytes, stream: str | None = None, *args: str) -> None:
        cases.append(Case(name, stream or f"fz-{len(cases)}", payload, args))

    # Every type, valid; then two of its fields given values of other JSON kinds.
    for type_name, (kind, data) in VALID.items():
        add(f"valid {type_name}", line({"type": type_name, "data": data}),
            stream_for(kind, len(cases)))
        for field in list(data)[:2]:
            for value in WRONG:
                if type(value) is type(data[field]) and value == data[field]:
                    continue
                add(f"{type_name}.{field}={value!r}",
                    line({"type": type_name, "data": {**data, field: value}}),
                    stream_for(kind, len(cases)))
    # Integers at and past the limits.
    for value in (0, -1, 2**31 - 1, 2**31, 10**10, 2**63 - 1, 2**63, -(2**63), -(2**63) - 1):
        add(f"chapter {value}", line({"type": "chapter.moved", "data": {"chapter": value}}))
        add(f"setting {value}", line({"type": "setting.changed",
                                      "data": {"key": "k", "value": value}}),
            f"scope:int-{len(cases)}")
    add("integer of 4301 digits", b'{"type":"setting.changed","data":{"key":"k","value":'
        + b"9" * 4301 + b"}}\n", "scope:big")
    add("integer of 4300 digits", b'{"type":"setting.changed","data":{"key":"k","value":'
        + b"9" * 4300 + b"}}\n", "scope:big")
    for literal in (b"NaN", b"Infinity", b"-Infinity", b"1e400", b"-0.0", b"1e-400",
                    b"0.1", b"1E2", b"-0"):
        add(f"number {literal.decode()}", b'{"type":"setting.changed","data":{"key":"k",'
            b'"value":' + literal + b"}}\n", "scope:numbers")
    # NUL and lone surrogates anywhere: data, keys, metadata, type, id, stream.
    for bad in ("\x00", "\ud800", "\udfff", "\udc80x", "x\ud83d", "\ud83d\ude00"):
        tag = repr(bad)
        add(f"content {tag}", line(message(bad)))
        add(f"setting key {tag}", line({"type": "setting.changed",
                                        "data": {"key": f"k{bad}", "value": 1}}), "scope:keys")
        add(f"nested object key {tag}", line({"type": "setting.changed", "data": {
            "key": "k", "value": {"outer": {bad: 1}}}}), "scope:keys")
        add(f"metadata actor {tag}", line({**message(), "metadata": {"actor": bad}}))
        add(f"metadata extra key {tag}", line({**message(), "metadata": {"extra": {bad: 1}}}))
        add(f"type {tag}", line({"type": f"message{bad}", "data": {}}))
        add(f"id {tag}", line({**message(), "id": f"6f1c1a52-59d6-4a3e-8d3b-3f1f0ba4f3a{bad}"}))
        add(f"stream {tag}", line(message()), f"odd{bad}stream")
    # Metadata and ids.
    add("unknown metadata key", line({**message(), "metadata": {"actr": "me"}}))
    add("metadata extra object", line({**message(), "metadata": {"extra": {"app": [1, 2]}}}))
    add("metadata extra not an object", line({**message(), "metadata": {"extra": 1}}))
    add("causation_id not a string", line({**message(), "metadata": {"causation_id": 5}}))
    add("forked_from", line({**message(), "metadata": {"forked_from": "other"}}))
    add("id and event_id", line({**message(), "id": "6f1c1a52-59d6-4a3e-8d3b-3f1f0ba4f3a1",
                                 "event_id": "6f1c1a52-59d6-4a3e-8d3b-3f1f0ba4f3a1"}))
    add("event_id alone", line({**message(), "event_id": "7f1c1a52-59d6-4a3e-8d3b-3f1f0ba4f3a1"}))
    add("id not a UUID", line({**message(), "id": "not-a-uuid"}))
    add("id upper case", line({**message(), "id": "8F1C1A52-59D6-4A3E-8D3B-3F1F0BA4F3A1"}))
    add("same id twice", lines({**message(), "id": "9f1c1a52-59d6-4a3e-8d3b-3f1f0ba4f3a1"},
                               {**message(), "id": "9f1c1a52-59d6-4a3e-8d3b-3f1f0ba4f3a1"}))
    add("schema_version true", line({**message(), "schema_version": True}))
    add("schema_version 0", line({**message(), "schema_version": 0}))
    add("unknown top-level key", line({**message(), "extra": 1}))
    # The stream's own history.
    add("retract unknown", line({"type": "message.retracted", "data": {"message_id": "no"}}))
    add("retract twice", lines(message(message_id="m1"),
                               {"type": "message.retracted", "data": {"message_id": "m1"}},
                               {"type": "message.retracted", "data": {"message_id": "m1"}}))
    add("retract in batch", lines(message(message_id="m1"),
                                  {"type": "message.retracted", "data": {"message_id": "m1"}}))
    add("retract default id", lines(
        {**message(), "id": "af1c1a52-59d6-4a3e-8d3b-3f1f0ba4f3a1"},
        {"type": "message.retracted",
         "data": {"message_id": "af1c1a52-59d6-4a3e-8d3b-3f1f0ba4f3a1"}}))
    add("started twice", lines({"type": "session.started", "data": {}},
                               {"type": "session.started", "data": {}}))
    add("summarize unknown", line({"type": "history.summarized",
                                   "data": {"through_message_id": "no", "summary": "s"}}))
    add("summarize known", lines(message(message_id="m1"), {
        "type": "history.summarized", "data": {"through_message_id": "m1", "summary": "s"}}))
    add("stream kind", line({"type": "tool.registered",
                             "data": {"name": "x", "tool_type": "builtin"}}))
    # JSON and framing edge cases.
    ok = line(message())
    add("BOM first", b"\xef\xbb\xbf" + ok)
    add("BOM on line 2", ok + b"\xef\xbb\xbf" + ok)
    add("CRLF", ok.replace(b"\n", b"\r\n") * 2)
    add("CR only", ok.replace(b"\n", b"\r") * 2)
    add("blank lines", b"\n \n\t\n" + ok + b"\n\n")
    add("only blank lines", b"\n\n  \n")
    add("empty input", b"")
    add("no trailing newline", ok.rstrip(b"\n"))
    add("trailing garbage", ok.rstrip(b"\n") + b" x\n")
    add("two objects on a line", ok.rstrip(b"\n") + ok)
    add("duplicate keys", b'{"type":"message.appended","type":"tool.used",'
        b'"data":{"role":"user","content":"x"}}\n')
    add("array", b"[1,2]\n")
    add("string", b'"x"\n')
    add("null", b"null\n")
    add("number", b"1\n")
    add("invalid UTF-8", b'{"type":"message.appended","data":{"role":"user","content":"\xff"}}\n')
    add("overlong UTF-8", b'{"type":"message.appended","data":{"role":"user",'
        b'"content":"\xc0\xaf"}}\n')
    add("UTF-16", ok.decode().encode("utf-16"))
    add("single quotes", b"{'type': 'message.appended'}\n")
    add("comment", b"// hi\n" + ok)
    add("data null", line({"type": "message.appended", "data": None}))
    add("data missing", line({"type": "session.started"}))
    add("type missing", line({"data": {}}))
    add("type number", line({"type": 5, "data": {}}))
    add("escaped unicode pair", b'{"type":"message.appended","data":{"role":"user",'
        b'"content":"\\ud83d\\ude00 \\u00e9"}}\n')
    # Huge and deep values.
    for depth in (10, 63, 64, 65, 200, 5000, 100_000):
        nested = b'{"a":' * depth + b"1" + b"}" * depth
        add(f"depth {depth}", b'{"type":"setting.changed","data":{"key":"k","value":'
            + nested + b"}}\n", "scope:deep")
    add("deep array", b'{"type":"setting.changed","data":{"key":"k","value":'
        + b"[" * 3000 + b"]" * 3000 + b"}}\n", "scope:deep")
    add("content 1 MiB", line(message("x" * (1024 * 1024))))
    add("content just under", line(message("x" * (1024 * 1024 - 200))))
    add("wide array", line({"type": "setting.changed",
                            "data": {"key": "k", "value": list(range(200_000))}}), "scope:wide")
    add("many keys", line({"type": "setting.changed", "data": {
        "key": "k", "value": {f"k{i}": i for i in range(20_000)}}}), "scope:wide")
    add("long id field", line(message(message_id="m" * 201)))
    add("long profile", line({"type": "context.assembled", "data": {
        **VALID["context.assembled"][1], "profile": "p" * 101}}))
    add("many events", b"".join(line(message(str(i))) for i in range(2000)))
    # Odd stream ids.
    for stream in ("scope:", "scope:x:y", "system", "SYSTEM", " lead", "trail ", "tab\tid",
                   "new\nline", "ünïcödé", "🦜" * 200, "🦜" * 201, "s" * 200, "s" * 201,
                   "a/b", "'; DROP TABLE events;--", "%_", "\\", "\u200b", "scope:\u0301",
                   "\U0010ffff"):
        add(f"stream {stream[:12]!r}", line(message()), stream)
    add("expected version wrong", line(message()), "fz-ev", "--expected-version", "3")
    add("expected version huge", line(message()), "fz-ev2", "--expected-version",
        str(2**63))
    return cases


CORPUS = build_corpus()
assert len(CORPUS) >= 250, len(CORPUS)


@dataclass
class Backend:
    """One database the whole corpus runs against, and an engine to count its events."""

    url: str
    engine: sa.Engine

    def count(self) -> int:
        with self.engine.connect() as conn:
            return int(conn.exec_driver_sql("SELECT count(*) FROM events").scalar_one())


@pytest.fixture(scope="module")
def backends(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Backend, Backend]]:
    """The same fresh schema on SQLite and PostgreSQL, shared by every case in order."""
    folder = tmp_path_factory.mktemp("fuzz")
    with module_database("sqlite", folder) as lite, module_database("postgres", folder) as pg:
        pair = []
        for url in (lite, pg):
            with Ledger.open(url) as ledger:
                pair.append(Backend(url, ledger.engine))
        yield pair[0], pair[1]
        for backend in pair:
            backend.engine.dispose()


def run(backend: Backend, case: Case) -> tuple[Result, int, int]:
    before = backend.count()
    result = CliRunner().invoke(app, ["--db", backend.url, "append", case.stream, *case.args],
                                input=case.payload)
    return result, before, backend.count()


def check(result: Result, before: int, after: int) -> tuple[int, str, str]:
    out, err = result.stdout, result.stderr
    assert result.exit_code in (0, 1), (result.exit_code, out, err)
    assert result.exception is None or isinstance(result.exception, SystemExit), err
    assert "Traceback" not in out + err and "internal error" not in err, err
    if result.exit_code == 0:
        assert err == "" and len(out.splitlines()) == 1, (out, err)
        assert after > before or json.loads(out).get("duplicate"), out
    else:
        assert out == "" and len(err.splitlines()) == 1 and err.startswith("error: "), err
        assert after == before, "a failed append wrote events"
    return result.exit_code, out, err


@pytest.mark.parametrize("case", CORPUS, ids=[f"{i:03d}" for i in range(len(CORPUS))])
def test_same_verdict_on_both_backends(backends: tuple[Backend, Backend], case: Case) -> None:
    lite, pg = backends
    on_lite = check(*run(lite, case))
    on_pg = check(*run(pg, case))
    assert on_lite == on_pg, case.name


def test_corpus_covers_the_reported_cases() -> None:
    names = {case.name for case in CORPUS}
    for needed in ("chapter 10000000000", "content '\\x00'", "content '\\ud800'",
                   "integer of 4301 digits", "chapter.moved.chapter=True",
                   "chapter.moved.chapter='3'",
                   "setting key '\\ud800'", "nested object key '\\ud800'", "id and event_id",
                   "unknown metadata key", "retract unknown", "retract twice", "started twice",
                   "summarize unknown", "BOM first", "CRLF", "depth 100000", "content 1 MiB"):
        assert needed in names, needed


def test_a_coerced_value_is_refused_not_stored(tmp_path: Path) -> None:
    """``{"chapter": true}`` and ``"3"`` were stored as 1 and 3; now they are refused."""
    with Ledger.open(f"sqlite:///{tmp_path / 'c.db'}") as ledger:
        for value in (True, "3", 3.0):
            with pytest.raises(Exception, match="valid integer"):
                ledger.append("s", {"type": "chapter.moved", "data": {"chapter": value}})
        ledger.append("scope:x", {"type": "setting.changed",
                                  "data": {"key": "k", "value": {"a": "é😀"}}})
        (stored,) = ledger.events("scope:x")
        assert stored.data["value"] == {"a": "é😀"}


def test_other_reported_inputs_get_one_line_not_an_internal_error(tmp_path: Path) -> None:
    """``--now`` out of range, a policy file that is not UTF-8, a port that is no number."""
    url = f"sqlite:///{tmp_path / 'o.db'}"
    runner = CliRunner()
    assert runner.invoke(app, ["--db", url, "append", "s"],
                         input=line({"type": "session.started", "data": {}})).exit_code == 0
    policy = tmp_path / "policy.json"
    policy.write_bytes(b"\xff\xfe{}")
    attempts = [
        (["--db", url, "state", "s", "--now", "0001-01-01T00:00:00Z"], 1),
        (["--db", url, "state", "s", "--now", "0001-01-01T00:00:00+01:00"], 1),
        (["--db", url, "assemble", "s", "--now", "9999-12-31T23:59:59Z"], 1),
        (["--db", url, "assemble", "s", "--policy", str(policy)], 1),
        (["--db", "postgresql+psycopg://u@localhost:port/db", "verify"], 1),
        (["--db", url, "verify", "--anchor", '{"anchor": "ctxledger-anchor/1"}'], 1),
    ]
    for args, code in attempts:
        result = runner.invoke(app, args)
        assert result.exit_code == code, (args, result.stderr)
        assert "Traceback" not in result.stdout + result.stderr
        assert "internal error" not in result.stderr
        if code == 1:
            assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1


def test_the_api_raises_ledger_errors_not_raw_ones(tmp_path: Path) -> None:
    """Lone surrogates, huge integers, non-JSON values and absurd times through the API."""
    from datetime import UTC, datetime

    from ctxledger import EventValidationError

    with Ledger.open(f"sqlite:///{tmp_path / 'api.db'}") as ledger:
        ledger.append("s", {"type": "session.started", "data": {}})
        bad_events = [
            message("\ud800"),
            {**message(), "metadata": {"actor": "\udcff"}},
            {"type": "setting.changed", "data": {"key": "k", "value": {"\ud800": 1}}},
            {"type": "setting.changed", "data": {"key": "k", "value": 10**5000}},
            {"type": "setting.changed", "data": {"key": "k", "value": (1, 2)}},
            {"type": "setting.changed", "data": {"key": "k", "value": {1: "x"}}},
            {"type": "setting.changed", "data": {"key": "k", "value": b"x"}},
        ]
        nested: Any = 1
        for _ in range(5000):
            nested = [nested]
        bad_events.append({"type": "setting.changed", "data": {"key": "k", "value": nested}})
        for event in bad_events:
            with pytest.raises(EventValidationError):
                ledger.append("s", event)
        with pytest.raises(EventValidationError, match="outside"):
            ledger.state("s", now=datetime(1, 1, 1, tzinfo=UTC))
        with pytest.raises(EventValidationError, match="stream id"):
            ledger.append("a\x00b", message())
        assert ledger.head() == 1
