"""The browser view's forms refuse cross-site requests: a login or logout posted from
another origin, without the form's token, or with another form's or browser's token is a
403 problem that sets and clears no cookie. Direct HTTP requests (httpx) check each case;
Chromium checks what a real attacker page does: one served from another loopback origin
(another port of 127.0.0.1, the same site, whose requests carry the victim's SameSite
cookies; and 127.0.0.2) auto-submits forms to the real server. Same-origin login and
logout still work. On SQLite and PostgreSQL."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from html import escape
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
from helpers.chromium import launched_chromium
from helpers.service import make_key
from helpers.service_fixtures import Served, served

__all__ = ["served"]  # the fixture, used by name

LOGIN_COOKIE = "ctxledger_ui"
FORM_COOKIE = "ctxledger_ui_form"
_TOKEN = re.compile(r'name="form_token" value="([0-9a-f]*)"')


def _browser(served: Served) -> httpx.Client:
    """An httpx client holding cookies like a browser (no redirects followed)."""
    return httpx.Client(base_url=served.base, timeout=120.0)


def _form_token(http: httpx.Client, page: str) -> str:
    found = _TOKEN.search(http.get(page).text)
    assert found is not None and len(found.group(1)) == 64
    return found.group(1)


def _login(http: httpx.Client, served: Served, token: str) -> None:
    """Log ``http`` in through the login form, as the page of this origin posts it."""
    answer = http.post("/ui/login", headers={"Origin": served.base}, data={
        "token": token, "next": "/ui/", "form_token": _form_token(http, "/ui/login")})
    assert answer.status_code == 303 and answer.headers["location"] == "/ui/"
    assert http.cookies.get(LOGIN_COOKIE)


def _who(http: httpx.Client, headers: dict[str, bytes] | None = None) -> str | None:
    """The key id the view shows as logged in, or None (sent to the login form)."""
    answer = http.get("/ui/", headers=headers)
    if answer.status_code == 303:
        assert answer.headers["location"].startswith("/ui/login")
        return None
    assert answer.status_code == 200, answer.text
    found = re.search(r'aria-label="Logged in key">key ([0-9a-f]+)', answer.text)
    assert found is not None
    return found.group(1)


def _refused(answer: httpx.Response, words: str) -> None:
    assert answer.status_code == 403, answer.text
    assert answer.headers["content-type"] == "application/problem+json"
    assert words in answer.json()["detail"]
    assert "set-cookie" not in answer.headers  # nothing set, nothing cleared


@pytest.fixture(scope="module")
def keys(served: Served) -> tuple[str, str]:
    """The victim's and the attacker's tokens."""
    return make_key(served.url, ["victim"]), make_key(served.url, ["attacker"])


def _key_id(token: str) -> str:
    return token.split("_")[1]


def test_same_origin_login_and_logout_work(served: Served, keys: tuple[str, str]) -> None:
    victim, _ = keys
    with _browser(served) as http:
        _login(http, served, victim)
        assert _who(http) == _key_id(victim)
        logout = _form_token(http, "/ui/")
        answer = http.post("/ui/logout", headers={"Origin": served.base},
                           data={"form_token": logout})
        assert answer.status_code == 303
        assert _who(http) is None


@pytest.mark.parametrize("headers", [
    {}, {"Origin": "null"}, {"Origin": "http://127.0.0.2:{port}"},
    {"Origin": "http://127.0.0.1:1"}, {"Origin": "https://127.0.0.1:{port}"},
    {"Origin": "http://evil.example"}, {"Referer": "http://evil.example/ui/login"},
    {"Referer": "http://127.0.0.1:1/ui/login"}, {"Referer": "http://[::1/"},
    {"Origin": "http://evil.example", "Referer": "http://127.0.0.1:{port}/ui/login"},
], ids=lambda headers: repr(headers))
def test_another_or_no_origin_is_refused(served: Served, keys: tuple[str, str],
                                         headers: dict[str, str]) -> None:
    victim, attacker = keys
    port = served.base.rsplit(":", 1)[1]
    sent = {name: value.replace("{port}", port) for name, value in headers.items()}
    with _browser(served) as http:
        _login(http, served, victim)
        login_token = _form_token(http, "/ui/login")
        _refused(http.post("/ui/login", headers=sent, data={
            "token": attacker, "form_token": login_token}), "not posted from a page")
        _refused(http.post("/ui/logout", headers=sent, data={
            "form_token": _form_token(http, "/ui/")}), "not posted from a page")
        assert _who(http) == _key_id(victim)


def test_the_referer_stands_in_for_a_missing_origin(served: Served,
                                                    keys: tuple[str, str]) -> None:
    victim, _ = keys
    with _browser(served) as http:
        answer = http.post("/ui/login", headers={"Referer": f"{served.base}/ui/login"},
                           data={"token": victim,
                                 "form_token": _form_token(http, "/ui/login")})
        assert answer.status_code == 303
        assert _who(http) == _key_id(victim)


def test_a_missing_or_foreign_form_token_is_refused(served: Served,
                                                    keys: tuple[str, str]) -> None:
    victim, attacker = keys
    origin = {"Origin": served.base}
    with _browser(served) as other:  # the attacker's own browser: a real token, its own
        foreign = _form_token(other, "/ui/login")
    with _browser(served) as http:
        _login(http, served, victim)
        logout = _form_token(http, "/ui/")
        login = _form_token(http, "/ui/login")
        for form in ({}, {"form_token": ""}, {"form_token": "0" * 64},
                     {"form_token": foreign}, {"form_token": logout},  # the other form's
                     {"form_token": login + "0"}):
            _refused(http.post("/ui/login", headers=origin,
                               data={"token": attacker, **form}), "token")
        for form in ({}, {"form_token": login}, {"form_token": "\u00e9" * 64}):
            _refused(http.post("/ui/logout", headers=origin, data=form), "token")
        assert _who(http) == _key_id(victim)
        # Without its form cookie even the right field is refused.
        http.cookies.delete(FORM_COOKIE)
        _refused(http.post("/ui/logout", headers=origin, data={"form_token": logout}),
                 "token")
        assert _who(http) == _key_id(victim)


@pytest.mark.parametrize("value", [
    "abc.{big}.ff", "{key}.{big}.{mac}", "{key}.{past}.{mac}", "x" * 4000, "a.-5.b", "..",
    "{key}.1.{mac}", "{key}.{issued}.{mac}0", "{key}\u00e9.{issued}.{mac}"])
def test_a_malformed_login_cookie_is_a_logged_out_browser(
        served: Served, keys: tuple[str, str], value: str) -> None:
    victim, _ = keys
    with _browser(served) as http:
        _login(http, served, victim)
        key, issued, mac = http.cookies[LOGIN_COOKIE].split(".")
        forged = value.format(key=key, issued=issued, mac=mac, big="9" * 5000,
                              past=str(2**63))
    cookie = {"Cookie": f"{LOGIN_COOKIE}={forged}".encode()}  # bytes: any octets
    with _browser(served) as http:
        assert _who(http, cookie) is None
        answer = http.get("/ui/sessions/x/timeline", params={"step": "9" * 5000},
                          headers=cookie)
        assert answer.status_code in (303, 422)  # logged out, or a step that is no step


def test_a_policy_too_deep_or_too_long_is_the_audit_forms_error(
        served: Served, keys: tuple[str, str]) -> None:
    victim, _ = keys
    with _browser(served) as http:
        _login(http, served, victim)
        with httpx.Client(base_url=served.base, timeout=120.0,
                          headers={"Authorization": f"Bearer {victim}"}) as api:
            assert api.post("/streams/deep-policy/events", json={"events": [
                {"type": "session.started", "data": {"scope": "victim"}}]}).status_code == 200
        for policy, words in (("[" * 5000, "policy is not valid JSON: it is nested too deeply"),
                              ('{"context_limit": ' + "9" * 5000 + "}",
                               "policy is not valid JSON: Exceeds the limit")):
            answer = http.get("/ui/sessions/deep-policy/audit", params={"policy": policy})
            assert answer.status_code == 400, answer.text[:300]
            assert words in answer.text


# -- Chromium and an attacker page on another origin -----------------------------------------


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Chromium, headless, launched once for the module."""
    yield from launched_chromium()


class _Attacker:
    """An HTTP server on another loopback origin whose pages auto-submit a form to the
    real server (script and all: an attacker's page has no CSP of ours)."""

    def __init__(self, host: str) -> None:
        self.pages: dict[str, str] = {}
        pages = self.pages

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = pages.get(self.path, "").encode()
                self.send_response(200 if body else 404)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer((host, 0), Handler)
        self.base = f"http://{host}:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def page(self, path: str, action: str, fields: dict[str, str]) -> str:
        inputs = "".join(f'<input type="hidden" name="{escape(n)}" value="{escape(v)}">'
                         for n, v in fields.items())
        self.pages[path] = (f'<!doctype html><form id="f" method="post" action="{action}">'
                            f'{inputs}</form><script>document.getElementById("f")'
                            '.submit()</script>')
        return self.base + path

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()


@pytest.fixture(scope="module", params=["127.0.0.1", "127.0.0.2"])
def attacker(request: pytest.FixtureRequest) -> Iterator[_Attacker]:
    served = _Attacker(request.param)
    yield served
    served.close()


def _log_in_chromium(context: Any, served: Served, token: str) -> Any:
    page = context.new_page()
    page.goto(f"{served.base}/ui/login")
    page.get_by_label("API key").fill(token)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url(f"{served.base}/ui/")
    return page


def _chromium_who(page: Any, served: Served) -> str | None:
    page.goto(f"{served.base}/ui/")
    if "/ui/login" in page.url:
        return None
    return str(page.get_by_label("Logged in key").inner_text()).split()[1]


def _attack(page: Any, url: str, action: str) -> int:
    """Open the attacker's page; the status of the form post it makes to ``action``."""
    with page.expect_response(lambda r: r.url == action and r.request.method == "POST"
                              ) as posted:
        page.goto(url)
    return int(posted.value.status)


def test_chromium_attacker_pages_neither_log_in_nor_out(
        served: Served, browser: Any, attacker: _Attacker, keys: tuple[str, str]) -> None:
    victim, evil = keys
    login, logout = f"{served.base}/ui/login", f"{served.base}/ui/logout"
    with _browser(served) as own:  # the attacker's real token for its own browser
        stolen = _form_token(own, "/ui/login")
    context = browser.new_context()
    try:
        # A browser logged in to nothing is not logged in as the attacker.
        page = context.new_page()
        page.goto(login)  # it has its form cookie: only the origin check is left
        for fields in ({"token": evil, "next": "/ui/"},
                       {"token": evil, "next": "/ui/", "form_token": stolen}):
            assert _attack(page, attacker.page("/in", login, fields), login) == 403
            assert _chromium_who(page, served) is None
        assert not [c for c in context.cookies() if c["name"] == LOGIN_COOKIE]

        # Logged in as the victim: the victim stays, neither replaced nor logged out.
        page = _log_in_chromium(context, served, victim)
        assert _chromium_who(page, served) == _key_id(victim)
        assert _attack(page, attacker.page("/in2", login, {"token": evil}), login) == 403
        assert _attack(page, attacker.page("/out", logout, {}), logout) == 403
        assert _chromium_who(page, served) == _key_id(victim)

        # The same origin's own Log out button still works.
        page.get_by_role("button", name="Log out").click()
        page.wait_for_url(login)
        assert _chromium_who(page, served) is None
        assert not [c for c in context.cookies() if c["name"] == LOGIN_COOKIE]
    finally:
        context.close()
