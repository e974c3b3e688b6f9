"""CORS (``ctxledger serve --cors-origin``): a page on another origin may call the API only
when its origin was named. Preflights over HTTP, and a real cross-origin ``fetch`` from
Chromium on a page served by another loopback origin, on SQLite and PostgreSQL."""

from __future__ import annotations

import http.server
import subprocess
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from helpers.chromium import launched_chromium
from helpers.databases import module_database
from helpers.service import CTXLEDGER_BIN, make_key, running_server
from helpers.service_fixtures import BACKENDS

PAGE = b"<!doctype html><title>other origin</title><p>a page of another origin</p>"


class _Page(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(PAGE)))
        self.end_headers()
        self.wfile.write(PAGE)

    def log_message(self, *args: Any) -> None:
        """Quiet."""


@pytest.fixture(scope="module")
def page_origin() -> Iterator[str]:
    """A page served by another loopback origin (another port)."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Page)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


class World:
    """Two servers over one database: one allowing ``origin``, one allowing none."""

    def __init__(self, url: str, open_base: str, closed_base: str, token: str) -> None:
        self.url, self.open_base, self.closed_base, self.token = (
            url, open_base, closed_base, token)


@pytest.fixture(scope="module", params=BACKENDS)
def world(request: pytest.FixtureRequest, page_origin: str,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    with module_database(request.param, tmp_path_factory.mktemp("cors")) as url:
        token = make_key(url, ["team"])
        with (running_server(url, cors_origins=[page_origin]) as open_base,
              running_server(url) as closed_base):
            yield World(url, open_base, closed_base, token)


def _preflight(base: str, origin: str, method: str = "POST") -> httpx.Response:
    return httpx.options(f"{base}/streams/s1/events", headers={
        "Origin": origin, "Access-Control-Request-Method": method,
        "Access-Control-Request-Headers": "authorization, content-type"}, timeout=60)


def test_a_preflight_from_a_named_origin_is_allowed(world: World, page_origin: str) -> None:
    answer = _preflight(world.open_base, page_origin)
    assert answer.status_code == 200, answer.text
    assert answer.headers["access-control-allow-origin"] == page_origin
    assert "POST" in answer.headers["access-control-allow-methods"]
    allowed = answer.headers["access-control-allow-headers"].lower()
    assert "authorization" in allowed and "content-type" in allowed
    assert "access-control-allow-credentials" not in answer.headers


def test_no_other_origin_is_allowed(world: World, page_origin: str) -> None:
    other = _preflight(world.open_base, "http://127.0.0.2:9")
    assert other.status_code == 400
    assert "access-control-allow-origin" not in other.headers
    # Without the flag no origin is allowed: the preflight is no CORS answer at all.
    closed = _preflight(world.closed_base, page_origin)
    assert closed.status_code == 405
    assert "access-control-allow-origin" not in closed.headers
    plain = httpx.get(f"{world.closed_base}/healthz", headers={"Origin": page_origin})
    assert "access-control-allow-origin" not in plain.headers


def test_an_answer_carries_the_header_a_problem_too(world: World, page_origin: str) -> None:
    answer = httpx.get(f"{world.open_base}/sessions/nope/state",
                       headers={"Origin": page_origin,
                                "Authorization": f"Bearer {world.token}"})
    assert answer.status_code == 404
    assert answer.headers["access-control-allow-origin"] == page_origin


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    yield from launched_chromium()


_FETCH = """async ([base, token]) => {
  try {
    const posted = await fetch(base + "/streams/cors-1/events", {method: "POST",
      headers: {"Authorization": "Bearer " + token, "Content-Type": "application/json"},
      body: JSON.stringify({events: [
        {type: "session.started", data: {scope: "team"}},
        {type: "message.appended", data: {role: "user", content: "hi"}}]})});
    const state = await fetch(base + "/sessions/cors-1/state",
                              {headers: {"Authorization": "Bearer " + token}});
    return {posted: posted.status, state: state.status, body: await state.json()};
  } catch (error) {
    return {error: String(error)};
  }
}"""


def test_a_page_of_the_named_origin_calls_the_api_from_chromium(
        world: World, page_origin: str, browser: Any) -> None:
    context = browser.new_context()
    try:
        page = context.new_page()
        page.goto(page_origin + "/")
        assert page.evaluate("location.origin") == page_origin
        refused = page.evaluate(_FETCH, [world.closed_base, world.token])
        assert "error" in refused and "Failed to fetch" in refused["error"], refused
        done = page.evaluate(_FETCH, [world.open_base, world.token])
        assert done.get("posted") == 200, done
        assert done["state"] == 200 and done["body"]["messages"]["user"] == 1, done
    finally:
        context.close()


def test_serve_refuses_a_cors_origin_that_is_no_origin() -> None:
    result = subprocess.run([CTXLEDGER_BIN, "serve", "--db", "sqlite:///:memory:",
                             "--cors-origin", "http://localhost:5173/app"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 1
    assert "--cors-origin 'http://localhost:5173/app' is no origin" in result.stderr
    assert "Traceback" not in result.stderr
