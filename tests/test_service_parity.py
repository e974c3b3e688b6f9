"""The HTTP routes that do what the CLI does: a card uploaded (JSON or PNG), scope
lorebooks set and removed, assemblies recorded (``/turn``, ``/assemble?record=true``) and
audited as ``match`` by the service and by ``ctxledger audit``. A real server on SQLite
and PostgreSQL."""

from __future__ import annotations

import json
import subprocess
from typing import Any

import httpx
from helpers.service import CTXLEDGER_BIN, client, make_key
from helpers.service_fixtures import Served, fresh, served

from ctxledger import Ledger
from ctxledger.io._card_files import read_card
from ctxledger.io._examples import EXAMPLES_DIR
from ctxledger.projections.view_loader import load_lorebooks

__all__ = ["served"]  # the fixture, used by name

CARD = EXAMPLES_DIR / "cards" / "wren-halloway"
BOOK: dict[str, Any] = {"name": "Harbour", "entries": [
    {"keys": ["harbour"], "content": "The harbour never sleeps.", "enabled": True,
     "insertion_order": 100, "id": 0, "extensions": {}},
    {"keys": ["/(?<=sir )knight/i"], "use_regex": True, "name": "knights",
     "content": "A lookbehind RE2 refuses.", "enabled": True, "insertion_order": 90,
     "id": 1, "extensions": {}}]}


def _started(scope: str) -> dict[str, Any]:
    return {"type": "session.started", "data": {"scope": scope}}


def _setup(served: Served) -> tuple[str, str, str]:
    """A scope, a key for it and a session started in it."""
    scope, session = fresh("scope"), fresh("s")
    token = make_key(served.url, [scope])
    with client(served.base, token) as http:
        assert http.post(f"/streams/{session}/events",
                         json={"events": [_started(scope)]}).status_code == 200
    return scope, session, token


def _version(served: Served, stream: str) -> int:
    with Ledger.open(served.url, load_vocabulary=False) as ledger:
        return ledger.log.stream_version(stream)


def _problem(answer: httpx.Response, status: int) -> str:
    assert answer.status_code == status, answer.text
    assert answer.headers["content-type"] == "application/problem+json"
    detail: str = answer.json()["detail"]
    assert "\n" not in detail and "Traceback" not in detail
    return detail


# -- cards -----------------------------------------------------------------------------------


def test_a_card_is_uploaded_as_png_or_json_and_exported_as_written(served: Served) -> None:
    scope, session, token = _setup(served)
    png = CARD.with_suffix(".png").read_bytes()
    expected = read_card(png)
    with client(served.base, token) as http:
        done = http.post(f"/sessions/{session}/card", content=png,
                         headers={"Content-Type": "image/png"})
        assert done.status_code == 200, done.text
        out = done.json()
        assert out["name"] == expected["data"]["name"] and out["stream"] == session
        assert out["spec"] == expected["spec"] and out["warnings"] == []
        with Ledger.open(served.url, load_vocabulary=False) as ledger:
            assert ledger.export_card(session=session) == expected
            assert ledger.log.stream_version(session) == 2
        assert http.get(f"/sessions/{session}/card").json() == expected
        assert _problem(http.get(f"/scopes/{scope}/card"), 400) == (
            f"scope {scope!r} has no card")
        on_scope = http.post(f"/scopes/{scope}/card",
                             content=CARD.with_suffix(".json").read_bytes(),
                             headers={"Content-Type": "application/json"})
        assert on_scope.status_code == 200, on_scope.text
        assert on_scope.json()["stream"] == f"scope:{scope}"
        with Ledger.open(served.url, load_vocabulary=False) as ledger:
            assert ledger.export_card(scope=scope) == read_card(CARD.with_suffix(".json"))
        assert http.get(f"/scopes/{scope}/card").json() == read_card(
            CARD.with_suffix(".json"))


def test_a_bad_card_is_a_one_line_400_and_writes_nothing(served: Served) -> None:
    _, session, token = _setup(served)
    bad = {
        b"\x89PNG\r\n\x1a\nnot really": "body: ",
        b"{not json": "body: ",
        b"[1, 2]": "body: ",
        json.dumps({"spec": "chara_card_v2", "data": {"name": 5}}).encode(): "",
    }
    with client(served.base, token) as http:
        for raw, prefix in bad.items():
            detail = _problem(http.post(f"/sessions/{session}/card", content=raw), 400)
            assert detail.startswith(prefix), detail
        assert _version(served, session) == 1
        # Larger than the body limit: refused before it is read.
        _problem(http.post(f"/sessions/{session}/card", content=b" " * (1 << 20) + b"{}"),
                 413)
    assert _version(served, session) == 1


def test_card_routes_respect_the_key_s_scopes(served: Served) -> None:
    scope, session, _ = _setup(served)
    stranger = make_key(served.url, [fresh("other")])
    reader = make_key(served.url, [scope], read_only=True)
    body = CARD.with_suffix(".json").read_bytes()
    with client(served.base, stranger) as http:
        hidden = http.post(f"/sessions/{session}/card", content=body)
        missing = http.post(f"/sessions/{fresh('s')}-x/card", content=b"{not json")
        assert _problem(hidden, 404) == f"unknown session {session!r}"
        assert missing.status_code == 400  # its own new session: only the file is wrong
        assert _problem(http.post(f"/scopes/{scope}/card", content=body), 404)
        assert _problem(http.get(f"/scopes/{scope}/card"), 404) == f"unknown scope {scope!r}"
        assert _problem(http.get(f"/sessions/{session}/card"), 404)
        assert _problem(http.put(f"/scopes/{scope}/lorebooks/b", json=BOOK), 404)
        assert _problem(http.delete(f"/scopes/{scope}/lorebooks/b"), 404)
    with client(served.base, reader) as http:
        assert _problem(http.post(f"/sessions/{session}/card", content=body), 403)
        assert _problem(http.put(f"/scopes/{scope}/lorebooks/b", json=BOOK), 403)
    assert _version(served, session) == 1 and _version(served, f"scope:{scope}") == 0


# -- lorebooks -------------------------------------------------------------------------------


def test_a_scope_lorebook_is_set_replaced_and_removed(served: Served) -> None:
    scope, _, token = _setup(served)
    world_info = {"entries": {"7": {"uid": 7, "key": ["storm"], "content": "Storms.",
                                    "order": 10}}}
    with client(served.base, token) as http:
        done = http.put(f"/scopes/{scope}/lorebooks/harbour", json=BOOK)
        assert done.status_code == 200, done.text
        out = done.json()
        assert (out["book_id"], out["entries"], out["stream"]) == (
            "harbour", 2, f"scope:{scope}")
        assert out["warnings"] == [
            "lorebook 'world:harbour' entry 'knights': regex key '/(?<=sir )knight/i' is"
            " not supported by RE2: lookbehind (invalid perl operator: (?<=)"]
        converted = http.put(f"/scopes/{scope}/lorebooks/weather", json=world_info)
        assert converted.status_code == 200 and converted.json()["entries"] == 1
        with Ledger.open(served.url, load_vocabulary=False) as ledger, \
                ledger.log.connection() as conn:
            books = {b.book_id: dict(b.book) for b in load_lorebooks(conn, scope)}
        assert books["harbour"] == BOOK and books["weather"]["entries"][0]["keys"] == [
            "storm"]
        version = _version(served, f"scope:{scope}")
        _problem(http.put(f"/scopes/{scope}/lorebooks/x", content=b"{nope"), 400)
        _problem(http.put(f"/scopes/{scope}/lorebooks/x", json={"entries": 5}), 400)
        assert _version(served, f"scope:{scope}") == version
        gone = http.delete(f"/scopes/{scope}/lorebooks/harbour")
        assert gone.status_code == 200 and gone.json()["position"] > 0
        again = _problem(http.delete(f"/scopes/{scope}/lorebooks/harbour"), 404)
        assert again == f"scope {scope!r} has no lorebook 'harbour'"
        with Ledger.open(served.url, load_vocabulary=False) as ledger, \
                ledger.log.connection() as conn:
            assert [b.book_id for b in load_lorebooks(conn, scope)] == ["weather"]


# -- recorded assemblies ---------------------------------------------------------------------


def test_turns_and_assemblies_are_recorded_and_audit_as_match(served: Served) -> None:
    _, session, token = _setup(served)
    with client(served.base, token) as http:
        turn = http.post(f"/sessions/{session}/turn", json={
            "messages": [{"role": "user", "content": "Hello there"}], "profile": "session"})
        assert turn.status_code == 200, turn.text
        recorded = turn.json()["recorded"]
        assert recorded["positions"] and recorded["stream_version"] == 3
        quiet = http.post(f"/sessions/{session}/turn", json={
            "messages": [{"role": "user", "content": "Off the record"}], "record": False})
        assert quiet.json()["recorded"] is None and quiet.json()["append"][
            "stream_version"] == 4
        plain = http.get(f"/sessions/{session}/assemble", params={"profile": "card"})
        assert "Recorded-Position" not in plain.headers
        kept = http.post(f"/sessions/{session}/assemble",
                         params={"profile": "session", "record": "true"},
                         json={"policy": {"profile": "session", "max_chars": 900}})
        assert kept.status_code == 200, kept.text
        assert int(kept.headers["Recorded-Position"]) > recorded["positions"][0]
        audit = http.get(f"/sessions/{session}/audit").json()
        assert audit["ok"] and audit["counts"]["match"] == 2, audit
        assert [r["status"] for r in audit["records"]] == ["match", "match"]
        assert [r["policy_stored"] for r in audit["records"]] == [True, True]
    cli = subprocess.run([CTXLEDGER_BIN, "audit", session, "--db", served.url],
                         capture_output=True, text=True, timeout=300)
    assert cli.returncode == 0, cli.stderr
    assert json.loads(cli.stdout)["counts"]["match"] == 2


def test_recording_needs_a_key_that_may_write(served: Served) -> None:
    scope, session, _ = _setup(served)
    reader = make_key(served.url, [scope], read_only=True)
    with client(served.base, reader) as http:
        assert http.get(f"/sessions/{session}/assemble").status_code == 200
        _problem(http.get(f"/sessions/{session}/assemble", params={"record": "true"}), 403)
    assert _version(served, session) == 1
