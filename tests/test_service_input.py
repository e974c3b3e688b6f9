"""No request input reaches a 500: numbers past what ``int()`` converts (5,000 digits) or a
backend stores, negative ones, times without a zone or outside the stored range, garbage
and NUL, in headers, query parameters, path parameters, bodies and the browser view's
cookie. Each is a 4xx problem with a one-line detail and writes nothing; a malformed
login cookie is a logged-out browser. Against a real server on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import httpx
import pytest
from helpers.service import client, make_key
from helpers.service_fixtures import Served, fresh, served

__all__ = ["served"]  # the fixture, used by name

BIG = "9" * 5000  # more digits than int() converts
PAST = str(2**63)  # one past the largest position a backend stores
MAX = "9223372036854775807"
AHEAD = "9999-12-31T23:59:59-05:00"  # a valid ISO time, in UTC past year 9999
EARLY = "0001-01-01T00:00:00+05:00"  # before year 1 in UTC
NAIVE = "2025-01-01T00:00:00"


@pytest.fixture(scope="module")
def token(served: Served) -> str:
    return make_key(served.url, ["p"])


@pytest.fixture(scope="module")
def session(served: Served, token: str) -> str:
    name = fresh("input")
    with client(served.base, token) as http:
        answer = http.post(f"/streams/{name}/events", json={"events": [
            {"type": "session.started", "data": {"scope": "p"}},
            {"type": "message.appended", "data": {"role": "user", "content": "hi"}}]})
        assert answer.status_code == 200, answer.text
    return name


def _problem(response: httpx.Response, status: int) -> str:
    assert response.status_code == status, response.text[:500]
    assert response.headers["content-type"] == "application/problem+json"
    detail = response.json()["detail"]
    assert isinstance(detail, str) and "\n" not in detail and "Traceback" not in detail
    return detail


MESSAGE = {"type": "message.appended", "data": {"role": "user", "content": "x"}}
S = "{session}"
CASES: list[tuple[str, str, dict[str, Any], int, str]] = [
    # headers
    *[("POST", f"/streams/{S}/events", {"headers": {name: value}, "json": {"events": [MESSAGE]}},
       400, f"{name} must be an integer from 0 to {MAX}")
      for name in ("If-Match", "Expected-Version")
      for value in (BIG, PAST, "-1", '"garbage"', "\uff11".encode())],
    # bodies
    ("POST", f"/streams/{S}/events", {"json": {"events": [MESSAGE], "expected_version": 2**63}},
     422, "body.expected_version"),
    ("POST", f"/sessions/{S}/turn", {"json": {"messages": [{"role": "user", "content": "x"}],
                                              "expected_version": 2**63}},
     422, "body.expected_version"),
    ("POST", f"/sessions/{S}/fork", {"json": {"new_session": "f", "at": 2**63}}, 422, "body.at"),
    ("POST", f"/sessions/{S}/fork", {"json": {"new_session": "f", "at": -1}}, 422, "body.at"),
    ("POST", f"/sessions/{S}/fork", {"json": {"new_session": "f\u0000", "at": 1}}, 400,
     "stream id contains NUL"),
    # query parameters: positions and cursors
    *[("GET", f"/streams/{S}/events", {"params": {name: value}}, 422, f"query.{name}")
      for name in ("after", "limit") for value in (BIG, PAST, "-1", "x")],
    ("GET", "/events", {"params": {"after": BIG}}, 422, "query.after"),
    ("GET", "/scopes/p/usage", {"params": {"days": BIG}}, 422, "query.days"),
    ("GET", f"/streams/{S}/events/stream", {"params": {"after": BIG}}, 400,
     "after must be an integer from 0 to"),
    ("GET", f"/streams/{S}/events/stream", {"headers": {"Last-Event-ID": PAST}}, 400,
     "Last-Event-ID must be an integer from 0 to"),
    # query parameters: until (replay, its timeline, why) and now
    *[("GET", f"/sessions/{S}/{route}", {"params": {**extra, "until": value}}, 400,
       f"until {message}")
      for route, extra in (("replay", {}), ("replay", {"timeline": "true"}),
                           ("why", {"item": "message:x"}))
      for value, message in (
          (BIG, f"{'9' * 40!r}... (5000 characters) is past the largest log position ({MAX})"),
          (PAST, f"'{PAST}' is past the largest log position ({MAX})"),
          ("-5", "'-5' is neither a log position nor an ISO-8601 time"),
          ("garbage", "'garbage' is neither a log position nor an ISO-8601 time"),
          (NAIVE, f"'{NAIVE}' needs a zone, such as Z or +00:00"),
          (AHEAD, f"'{AHEAD}' is outside 1900-01-01 .. 9999-01-01"),
          (EARLY, f"'{EARLY}' is outside 1900-01-01 .. 9999-01-01"))],
    *[(method, f"/sessions/{S}/assemble", {"params": {"now": value}}, 400, f"now {message}")
      for method in ("GET", "POST")
      for value, message in (
          (BIG, f"{'9' * 40!r}... (5000 characters) is not an ISO-8601 time"),
          ("-5", "'-5' is not an ISO-8601 time"),  # not seconds since 1970
          ("1700000000", "'1700000000' is not an ISO-8601 time"),
          (NAIVE, f"'{NAIVE}' needs a zone, such as Z or +00:00"),
          (AHEAD, f"'{AHEAD}' is outside 1900-01-01 .. 9999-01-01"))],
    # path parameters and NUL anywhere in the path or the query string
    ("GET", f"/sessions/{BIG}/state", {}, 404, "unknown session"),
    ("GET", f"/streams/{BIG}/events", {}, 404, "unknown session"),
    ("GET", "/sessions/a%00b/state", {}, 400, "the path contains NUL"),
    ("GET", "/streams/%00/events", {}, 400, "the path contains NUL"),
    ("GET", "/scopes/%00/usage", {}, 400, "the path contains NUL"),
    ("GET", f"/sessions/{S}/state", {"params": {"agent": "\u0000"}}, 400,
     "query parameter 'agent' contains NUL"),
    ("GET", f"/sessions/{S}/why", {"params": {"item": "a\u0000"}}, 400,
     "query parameter 'item' contains NUL"),
]


@pytest.mark.parametrize(("method", "path", "request_args", "status", "detail"), CASES,
                         ids=[f"{i}-{c[0]} {c[1][:40]}" for i, c in enumerate(CASES)])
def test_bad_input_is_a_4xx_problem_and_writes_nothing(
        served: Served, token: str, session: str, method: str, path: str,
        request_args: dict[str, Any], status: int, detail: str) -> None:
    with client(served.base, token) as http:
        answer = http.request(method, path.replace(S, session), **request_args)
        assert detail in _problem(answer, status)
        events = http.get(f"/streams/{session}/events").json()["events"]
    assert len(events) == 2  # nothing was appended


def test_good_values_still_read(served: Served, token: str) -> None:
    name = fresh("good")
    with client(served.base, token) as http:
        answer = http.post(f"/streams/{name}/events", json={"events": [
            {"type": "session.started", "data": {"scope": "p"}}, MESSAGE]})
        assert answer.status_code == 200, answer.text
        head = answer.json()["positions"][-1]
        later = datetime.now(UTC).astimezone(timezone(timedelta(
            hours=1))).isoformat()  # just after the events, in another zone
        for until in (str(head), f" {head} ", later):
            answer = http.get(f"/sessions/{name}/replay", params={"until": until})
            assert answer.status_code == 200, answer.text
            assert answer.json()["position"] == head
        assembled = http.get(f"/sessions/{name}/assemble",
                             params={"now": "2030-01-01T01:00:00+01:00"})
        assert assembled.json()["now"].startswith("2030-01-01T00:00:00")  # in UTC
        answer = http.post(f"/streams/{name}/events", json={"events": [MESSAGE]},
                           headers={"If-Match": 'W/"2"'})
        assert answer.status_code == 200, answer.text
        answer = http.post(f"/streams/{name}/events", json={"events": [MESSAGE]},
                           headers={"If-Match": "2"})
        assert answer.status_code == 409  # read as a version, which is stale now
        # The largest position is a position, past the head: the ledger's own 400.
        assert "beyond the head" in _problem(
            http.get(f"/sessions/{name}/replay", params={"until": MAX}), 400)
