"""The tool use's own route (``ctxledger._hook._fast``): it takes only what the general
route would take as it is, finds the same spool, and writes a line the drainer reads
back as the event the in-process hook derives. (Its imports are checked on a real
process in test_hook_worker.py; what reaches the log, in test_hook.py.)"""

from __future__ import annotations

import io
import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from helpers.hook_events import PROJECT
from helpers.hook_events import hook_event as _event

from ctxledger._hook import _fast
from ctxledger._hook._events import HookInputError, parse_event, tool_use
from ctxledger._hook._route import database_url
from ctxledger._hook._spool import Spool, _parse_line, tool_use_line
from ctxledger._project import folder_scope, project_scope, user_data_dir
from ctxledger.io._bounded import BoundedInputError, read_bounded

GOOD = _event("PostToolUse", tool_name="mcp__github__create_issue", tool_use_id="toolu_1",
              tool_input={"title": "Fix it", "labels": ["bug"]},
              tool_response={"ok": True, "n": 1.5e3})


def _bytes(event: dict[str, Any], **options: Any) -> bytes:
    return json.dumps(event, **options).encode("utf-8", "surrogatepass")


def _nested(levels: int) -> dict[str, Any]:
    """A tool use whose ``tool_input`` takes the event to ``levels`` levels."""
    value: Any = {}
    for _ in range(levels - 2):
        value = {"a": value}
    return {**GOOD, "tool_input": value}


TAKEN = {
    "compact": _bytes(GOOD, separators=(",", ":")),
    "indented, CRLF": _bytes(GOOD, indent=2).replace(b"\n", b"\r\n"),
    "whitespace around": b" \t\r\n" + _bytes(GOOD) + b"\n\n ",
    "UTF-8 text": _bytes({**GOOD, "tool_input": {"t": "café ☕ 😀"}}, ensure_ascii=False),
    "an escaped lone surrogate": _bytes({**GOOD, "tool_input": {"t": "\ud800"}}),
    "an encoded lone surrogate": b'{"tool_input": "\xed\xa0\x80", '
                                 + _bytes(GOOD)[1:],
    "NaN and a long number": _bytes({**GOOD, "tool_response": {"x": float("nan"),
                                                               "n": 10 ** 300}}),
    "a failure": _bytes(_event("PostToolUseFailure", tool_name="Bash", tool_use_id="t2")),
    "no tool_use_id": _bytes({key: value for key, value in GOOD.items()
                              if key != "tool_use_id"}),
    "a key twice": _bytes(GOOD)[:-1] + b', "tool_name": "Read"}',
    "100 levels": _bytes(_nested(100)),
}
LEFT = {
    "not JSON": b"{not json",
    "extra data": _bytes(GOOD) + b" {}",
    "a list": b"[" + _bytes(GOOD) + b"]",
    "UTF-16": json.dumps(GOOD).encode("utf-16"),
    "UTF-8 with a BOM": b"\xef\xbb\xbf" + _bytes(GOOD),
    "a control character in a string": _bytes(GOOD)[:-1] + b', "x": "a\x01b"}',
    "invalid UTF-8": _bytes(GOOD)[:-1] + b', "x": "\xff"}',
    "a number past 4300 digits": _bytes(GOOD)[:-1] + b', "x": ' + b"9" * 5000 + b"}",
    "101 levels": _bytes(_nested(101)),
    "no tool_name": _bytes({**GOOD, "tool_name": None}),
    "an empty tool_name": _bytes({**GOOD, "tool_name": ""}),
    "a blank tool_name": _bytes({**GOOD, "tool_name": "  "}),
    "a blank cwd": _bytes({**GOOD, "cwd": " "}),
    "no session_id": _bytes({key: value for key, value in GOOD.items()
                             if key != "session_id"}),
    "a session start": _bytes(_event("SessionStart")),
    "an unhandled event": _bytes(_event("Elicitation")),
    "a tool start": _bytes(_event("PreToolUse")),
}


def _general(data: bytes) -> dict[str, Any] | None:
    """What the general route makes of ``data``: the payload it spools, or None."""
    try:
        event = parse_event(data)
        if event.name not in _fast.TOOL_EVENTS:
            return None
        tool_use(event)
    except (HookInputError, BoundedInputError):
        return None
    return dict(event.payload)


@pytest.mark.parametrize("what", sorted(TAKEN))
def test_the_route_takes_a_tool_use_the_general_route_takes(what: str) -> None:
    data = TAKEN[what]
    found = _fast.tool_payload(data, {})
    assert found is not None
    assert json.dumps(found, sort_keys=True) == json.dumps(_general(data), sort_keys=True)


@pytest.mark.parametrize("what", sorted(LEFT))
def test_the_route_leaves_anything_else_to_the_general_route(what: str) -> None:
    """None here: the general route takes it and says what is wrong, as before (a blank
    tool name or a BOM it takes as it always did)."""
    assert _fast.tool_payload(LEFT[what], {}) is None


@pytest.mark.parametrize(("environ", "taken"), [
    ({"CTXLEDGER_MAX_INPUT_DEPTH": "3"}, False),
    ({"CTXLEDGER_MAX_INPUT_DEPTH": "4"}, True),
    ({"CTXLEDGER_MAX_INPUT_DEPTH": "many"}, False),
    ({"CTXLEDGER_MAX_INPUT_BYTES": "100"}, False),
    ({"CTXLEDGER_MAX_INPUT_BYTES": "0"}, False),
    ({"CTXLEDGER_MAX_INPUT_BYTES": " 4096 "}, True)])
def test_the_input_limits_are_read_as_the_general_route_reads_them(
        environ: dict[str, str], taken: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    data = _bytes(_nested(4))
    assert (_fast.tool_payload(data, environ) is not None) is taken
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    try:
        general = _general(read_bounded(io.BytesIO(data), "the event"))
    except BoundedInputError:
        general = None  # a limit passed, or set to what is not a limit
    assert (general is not None) is taken


def test_the_time_the_spool_writes() -> None:
    for moment in (datetime(2026, 11, 27, 22, 5, 1, 7, tzinfo=UTC),
                   datetime(1999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
                   datetime(2024, 2, 29, 0, 0, tzinfo=UTC)):
        ns = int((moment - datetime(1970, 1, 1, tzinfo=UTC)) / timedelta(microseconds=1)) \
            * 1000 + 999
        assert _fast.utc_text(ns) == moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def test_the_route_finds_the_general_routes_spool(tmp_path: Path) -> None:
    data = tmp_path / "data"
    environ = {"XDG_DATA_HOME": str(data)}
    found = _fast.data_dir(environ)
    assert found == str(user_data_dir(environ))
    assert _fast.data_dir({"XDG_DATA_HOME": str(data) + "/"}) is None  # pathlib's form only
    assert found is not None
    os.makedirs(found, mode=0o700)
    project = tmp_path / "project"
    project.mkdir()
    for db, cwd, extra in [
            ("postgresql+psycopg://u@h/db", str(project), {}),
            (None, str(project), {"CTXLEDGER_DB": " sqlite:////x/y.db "}),
            (None, str(project), {}),  # the per-user database
            (None, "/", {})]:
        env = {**environ, **extra}
        url = _fast.database_url(db, cwd, env, found)
        assert url == database_url(db, cwd, env)
        assert _fast.spool_key(url) == Spool.of(url, env).key
    (project / "ctxledger.db").touch()  # the project's own database
    url = _fast.database_url(None, str(project), environ, found)
    assert url == database_url(None, str(project), environ) == (
        f"sqlite:///{project / 'ctxledger.db'}")
    # What the general route makes absolute, or a folder it would make, is left to it.
    assert _fast.database_url("sqlite:///relative.db", str(project), environ, found) is None
    assert _fast.database_url(None, "relative/folder", environ, found) is None
    assert _fast.database_url(None, str(project) + "/../project", environ, found) is None
    assert _fast.database_url(None, "/nonexistent", {"XDG_DATA_HOME": "/nonexistent"},
                              "/nonexistent/ctxledger") is None


def test_a_spooled_line_reads_back_as_the_in_process_tool_use(tmp_path: Path) -> None:
    """Pretty-printed on the way in, one line in the spool; the drainer derives what the
    in-process route derives, scope and time included."""
    data = tmp_path / "data" / "ctxledger"
    os.makedirs(data / "spool", mode=0o700)
    os.chmod(tmp_path / "data", 0o700)
    environ = {"XDG_DATA_HOME": str(tmp_path / "data")}
    raw = _bytes(GOOD, indent=2).replace(b"\n", b"\r\n")
    prepared = _fast.prepare(raw, "sqlite:////x/y.db", "executor", environ)
    assert prepared is not None
    folder, url, key, line = prepared
    assert (folder, url, key) == (str(data), "sqlite:////x/y.db",
                                  Spool.of(url, environ).key)
    assert line.count(b"\n") == 1 and line.endswith(b"\n") and b"\r" not in line
    spooled = _parse_line(line.rstrip(b"\n"))
    event = parse_event(raw)
    at = datetime(2030, 1, 2, 3, 4, 5, 6, tzinfo=UTC)
    in_process = _parse_line(tool_use_line(event, "executor", at, environ).rstrip(b"\n"))
    assert spooled._replace(at=at) == in_process
    assert spooled.scope == project_scope(PROJECT, environ={})
    assert abs(spooled.at - datetime.now(UTC)) < timedelta(minutes=5)
    overridden = _fast.prepare(raw, "sqlite:////x/y.db", None,
                               {**environ, "CTXLEDGER_SCOPE": " mine "})
    assert overridden is not None and _parse_line(overridden[3].rstrip()).scope == "mine"


def test_a_tool_use_without_an_id_keeps_the_transcript_size_it_saw(tmp_path: Path) -> None:
    os.makedirs(tmp_path / "data" / "ctxledger" / "spool", mode=0o700)
    os.chmod(tmp_path / "data", 0o700)
    transcript = tmp_path / "t.jsonl"
    transcript.write_text("0123456789")
    event = {key: value for key, value in GOOD.items() if key != "tool_use_id"}
    event["transcript_path"] = str(transcript)
    raw = _bytes(event)
    prepared = _fast.prepare(raw, "sqlite:////x/y.db", None,
                             {"XDG_DATA_HOME": str(tmp_path / "data")})
    assert prepared is not None
    seen_then = tool_use(parse_event(raw))[0]["id"]
    transcript.write_text("0123456789 and a reply")  # the transcript grows before the drain
    assert _parse_line(prepared[3].rstrip()).event["id"] == seen_then
    assert tool_use(parse_event(raw))[0]["id"] != seen_then
    assert folder_scope(os.path.realpath(PROJECT)) == project_scope(PROJECT, environ={})


def test_the_drain_request_is_the_one_a_worker_reads() -> None:
    """Protocol 1, as before: a worker of any version reads it (one of another build
    answers that and leaves, without draining a spool it does not know)."""
    from ctxledger._hook._worker import PROTOCOL, build

    assert json.loads(_fast.drain_request()) == {"v": PROTOCOL, "build": build(),
                                                 "op": "drain"}
    assert _fast.drain_request() == json.dumps(
        {"v": PROTOCOL, "build": build(), "op": "drain"}, ensure_ascii=True,
        separators=(",", ":")).encode("ascii")
