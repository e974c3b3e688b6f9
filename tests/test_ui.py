"""The browser view (``/ui``) in a real browser: Playwright drives Debian's Chromium
(``make browser`` installs it) against a real server, on SQLite and PostgreSQL.

The example sessions are loaded once per backend: a card chat whose example dialogue
expires and whose history gets a summary, a card chat whose lorebook fires, and a
``novel``, a ``brief`` and a ``session`` assembly. Every number checked on a page is
compared with what the JSON API answers for the same request. Each page's screenshot is
written to ``build/screenshots/`` (gitignored)."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers.chromium import launched_chromium
from helpers.databases import module_database
from helpers.service import client, make_key, running_server
from helpers.service_fixtures import BACKENDS, Served

from ctxledger import Ledger
from ctxledger._demo import load_and_assemble_examples
from ctxledger._service.keys import list_keys, revoke_key

pytest.importorskip("playwright.sync_api")  # the module needs Playwright

SHOTS = Path(__file__).resolve().parent.parent / "build" / "screenshots"
CARD = "rp-gullpoint-001"  # scope user-mara: mes_example expires, a summary lands
LORE = "rp-lowmere-001"  # scope user-ash: lorebook entries fire
OTHERS = {"novel": ("saltmarsh-draft-ch12", "book-saltmarsh"),
          "brief": ("ashfall-turn-042", "ashfall-campaign"),
          "session": ("acme-billing-2025-05-11", "acme-billing")}


@pytest.fixture(scope="module", params=BACKENDS)
def served(request: pytest.FixtureRequest,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """A server over a fresh database of each backend holding the example sessions."""
    with module_database(request.param, tmp_path_factory.mktemp("ui")) as url:
        load_and_assemble_examples(url)
        with running_server(url) as base:
            yield Served(base=base, url=url)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Chromium, headless, launched once for the module."""
    yield from launched_chromium()


@pytest.fixture
def backend(served: Served) -> str:
    return "postgres" if served.url.startswith("postgresql") else "sqlite"


def _page(browser: Any, served: Served, token: str) -> Any:
    """A new browser context logged in with ``token`` through the login form."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000},
                                  base_url=served.base)
    page = context.new_page()
    page.goto("/ui/")
    assert page.url.endswith("/ui/login?next=%2Fui%2F")
    page.get_by_label("API key").fill(token)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url(re.compile(r"/ui/$"))
    return page


def _shot(page: Any, name: str, backend: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}-{backend}.png"), full_page=True)


def _api(served: Served, token: str, path: str, **params: Any) -> Any:
    with client(served.base, token) as http:
        answer = http.get(path, params=params)
        assert answer.status_code == 200, answer.text
        return answer.json()


def test_login_cookie_cross_scope_and_revocation(served: Served, browser: Any,
                                                 backend: str) -> None:
    token = make_key(served.url, ["user-mara"], read_only=True)
    context = browser.new_context(base_url=served.base)
    page = context.new_page()
    page.goto(f"/ui/sessions/{CARD}")
    assert "/ui/login" in page.url
    page.get_by_label("API key").fill(token[:-3] + "xyz")
    page.get_by_role("button", name="Log in").click()
    assert page.get_by_role("alert").inner_text() == "The API key is unknown or revoked."
    _shot(page, "login", backend)
    page.get_by_label("API key").fill(token)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url(re.compile(rf"/ui/sessions/{CARD}$"))  # back where it was going
    cookies = {c["name"]: c for c in context.cookies()}
    assert sorted(cookies) == ["ctxledger_ui", "ctxledger_ui_form"]  # login, form token
    for cookie in cookies.values():
        assert cookie["httpOnly"] and cookie["sameSite"] == "Strict" and cookie["path"] == "/ui"
    cookie = cookies["ctxledger_ui"]
    secret = token.split("_", 2)[2]
    assert secret not in cookie["value"] and token.split("_")[1] in cookie["value"]
    assert page.evaluate("document.cookie") == ""  # no script can read it

    # A key of scope user-mara sees nothing of user-ash: the same 404 as no session.
    for path, text in ((f"/ui/sessions/{LORE}", f"unknown session '{LORE}'"),
                       (f"/ui/sessions/{LORE}/timeline", f"unknown session '{LORE}'"),
                       (f"/ui/sessions/{LORE}/why?item=lore:card:1",
                        f"unknown session '{LORE}'"),
                       (f"/ui/sessions/{LORE}/audit", f"unknown session '{LORE}'"),
                       ("/ui/scopes/user-ash", "unknown scope 'user-ash'"),
                       ("/ui/sessions/no-such-session", "unknown session 'no-such-session'")):
        answer = page.goto(path)
        assert answer is not None and answer.status == 404, path
        assert page.get_by_test_id("error").inner_text() == text
    assert LORE not in page.goto("/ui/scopes/user-mara").text()
    _shot(page, "cross-scope-404", backend)

    # Revoking the key ends the login at once.
    with Ledger.open(served.url, load_vocabulary=False) as ledger:
        key_id = token.split("_")[1]
        assert any(k.key_id == key_id for k in list_keys(ledger.engine))
        revoke_key(ledger.engine, key_id)
    page.goto(f"/ui/sessions/{CARD}")
    assert "/ui/login" in page.url
    context.close()


def test_card_breakdown_matches_the_api_and_expired_rows_are_struck(
        served: Served, browser: Any, backend: str) -> None:
    token = make_key(served.url, ["user-mara"], read_only=True)
    page = _page(browser, served, token)
    page.goto(f"/ui/sessions/{CARD}")
    api = _api(served, token, f"/sessions/{CARD}/assemble")
    report = api["report"]
    assert page.get_by_test_id("total-tokens").inner_text() == str(api["tokens"]["total"])
    assert page.get_by_test_id("subtotal").inner_text() == (
        f"Active: {report['total_tokens']} | Saved: {report['saved_tokens']}")
    # The rows add up: the framing and per-message overhead is a row of its own.
    overhead = (report["used_tokens"] - report["total_tokens"] - report["lorebook_tokens"]
                - report["chat_history"]["tokens"])
    assert page.get_by_test_id("sum-overhead").inner_text() == str(overhead)
    assert page.get_by_test_id("sum-total").inner_text() == str(report["used_tokens"])
    assert sum(int(page.get_by_test_id(part).inner_text())
               for part in ("sum-active", "sum-history", "sum-overhead")) \
        + report["lorebook_tokens"] == report["used_tokens"]
    expired = [row for row in report["breakdown"] if row["status"] == "expired"]
    assert expired, "the example's mes_example has expired"
    for row in report["breakdown"]:
        tr = page.locator(f'tr.field[data-field="{row["field_key"]}"]')
        assert tr.get_by_test_id("field-tokens").inner_text() == str(row["tokens"])
        decoration = tr.locator("td").nth(1).evaluate(
            "cell => getComputedStyle(cell).textDecorationLine")
        colour = tr.locator("td").nth(1).evaluate("cell => getComputedStyle(cell).color")
        if row["status"] == "expired":
            assert decoration == "line-through"
            assert colour == "rgb(138, 145, 158)"  # greyed out
            assert f"expired @ msg {row['expired_at_message']}" in tr.inner_text()
        elif row["status"] in ("permanent", "active"):
            assert decoration == "none"
    history = report["chat_history"]
    assert page.get_by_test_id("history").inner_text() == (
        f"chat history {history['tokens']} tokens (summarized from "
        f"{history['summarized_from']})")
    assert page.get_by_test_id("history-kept").inner_text() == str(history["messages"])
    assert page.get_by_test_id("history-summarized").inner_text() == str(
        history["summarized_messages"])
    sections = page.get_by_test_id("section-tokens").all_inner_texts()
    assert sections == [str(s["tokens"]) for s in api["sections"]]
    assert page.locator("ol.messages > li").count() == len(api["messages"])
    assert page.get_by_test_id("warning").all_inner_texts() == api["warnings"]
    _shot(page, "session-card", backend)


def test_clicking_a_row_shows_its_why_and_the_keyboard_does_too(
        served: Served, browser: Any, backend: str) -> None:
    token = make_key(served.url, ["user-mara"], read_only=True)
    page = _page(browser, served, token)
    page.goto(f"/ui/sessions/{CARD}")
    want = _api(served, token, f"/sessions/{CARD}/why", item="mes_example")
    # A click on the row (not on its link) asks why of the row's item.
    page.locator('tr.field[data-field="mes_example"] td').nth(2).click()
    line = page.locator("#why-body").get_by_test_id("why-line")
    line.wait_for()
    assert line.inner_text() == want["explanation"]
    # Each run in a plain sentence, from the same decision record as its numbers.
    sentences = page.locator("#why-body").get_by_test_id("why-sentence").all_inner_texts()
    assert len(sentences) == len(want["runs"])
    for shown, run in zip(sentences, want["runs"], strict=True):
        assert shown.startswith(run["sentence"]) and run["sentence"].endswith(".")
    expired = next(r for r in want["runs"] if r["action"] == "expired")
    detail = expired["detail"]
    assert expired["sentence"] == (
        f"The compression level {detail['level']} is {detail['min_level']}, the level at"
        f" which this field may expire, and the chat has {detail['message_count']} messages,"
        f" reaching the {detail['expires_at_message']} at which it expires, so it is"
        " expired.")
    assert page.evaluate("document.activeElement.id") == "why-panel"
    _shot(page, "why-panel", backend)

    # By keyboard: focus the first decision's why link, press Enter.
    first = _api(served, token, f"/sessions/{CARD}/assemble")["decisions"][0]["item"]
    want = _api(served, token, f"/sessions/{CARD}/why", item=first)
    page.locator(f'table.decisions a.why[data-item="{first}"]').focus()
    page.keyboard.press("Enter")
    page.locator(f'#why-body .why-report[data-item="{first}"]').wait_for()
    assert page.locator("#why-body").get_by_test_id("why-line").inner_text() == (
        want["explanation"])


def test_timeline_one_step_per_message_markers_and_step_assembly(
        served: Served, browser: Any, backend: str) -> None:
    scope = f"ui-{uuid.uuid4().hex[:8]}"
    token = make_key(served.url, [scope])
    session = f"chat-{uuid.uuid4().hex[:8]}"
    messages = 45  # more than a page of the 20 steps the view once drew at most
    events = [{"type": "session.started", "data": {"scope": scope}}] + [
        {"type": "message.appended",
         "data": {"role": "user" if i % 2 else "assistant", "content": f"line {i} " * i}}
        for i in range(1, messages + 1)]
    with client(served.base, token) as http:
        assert http.post(f"/streams/{session}/events",
                         json={"events": events}).status_code == 200
    page = _page(browser, served, token)
    page.goto(f"/ui/sessions/{session}/timeline")
    steps = _api(served, token, f"/sessions/{session}/replay", timeline="true")
    assert len(steps) == messages
    assert page.locator("svg.timeline-chart a.step").count() == messages
    assert page.locator("table.steps-table tbody tr").count() == messages
    assert page.get_by_test_id("window").count() == 0  # every step drawn: no paging
    # Click the third column: the page shows that step's assembly, equal to the replay
    # at its position.
    page.locator('svg.timeline-chart a.step[data-step="3"] rect.hit').click()
    page.wait_for_url(re.compile(r"step=3$"))
    at = _api(served, token, f"/sessions/{session}/replay", until=str(steps[2]["position"]))
    assert page.get_by_test_id("total-tokens").inner_text() == str(at["tokens"]["total"])
    assert page.locator("ol.messages > li").count() == len(at["messages"])
    _shot(page, "timeline-plain", backend)


def test_timeline_markers_open_the_why_of_their_item(served: Served, browser: Any,
                                                     backend: str) -> None:
    token = make_key(served.url, ["user-mara", "user-ash"], read_only=True)
    page = _page(browser, served, token)
    page.goto(f"/ui/sessions/{CARD}/timeline")
    steps = _api(served, token, f"/sessions/{CARD}/replay", timeline="true")
    assert page.locator("svg.timeline-chart a.step").count() == len(steps)
    expired = page.locator("svg.timeline-chart a.marker-expired")
    assert expired.count() == 1 and expired.get_attribute("data-item") == "mes_example"
    assert page.locator("svg.timeline-chart a.marker-summary").count() == 1
    want = _api(served, token, f"/sessions/{CARD}/why", item="mes_example")
    expired.locator("text").click()
    line = page.locator("#why-body").get_by_test_id("why-line")
    line.wait_for()
    assert line.inner_text() == want["explanation"]
    _shot(page, "timeline-card", backend)
    page.goto(f"/ui/sessions/{LORE}/timeline")
    lore = page.locator("svg.timeline-chart a.marker-lore")
    assert lore.count() >= 1
    item = lore.first.get_attribute("data-item")
    assert item is not None and item.startswith("lore:")
    lore.first.focus()  # markers are in the tab order; Enter opens them
    page.keyboard.press("Enter")
    page.locator(f'#why-body .why-report[data-item="{item}"]').wait_for()
    _shot(page, "timeline-lorebook", backend)
    page.goto(f"/ui/sessions/{LORE}")
    rows = page.locator("table.lorebook tbody tr")
    api = _api(served, token, f"/sessions/{LORE}/assemble")["report"]["lorebook"]
    assert rows.count() == len(api)
    _shot(page, "session-lorebook", backend)


def test_audit_statuses_and_what_if_diff(served: Served, browser: Any,
                                         backend: str) -> None:
    token = make_key(served.url, ["user-mara"], read_only=True)
    with Ledger.open(served.url, load_vocabulary=False) as ledger:
        assembly = ledger.replay(CARD, profile="card")
        ledger.record_assembly(CARD, assembly)
        policy = ledger.policy(CARD, "card").model_dump(mode="json")
    page = _page(browser, served, token)
    page.goto(f"/ui/sessions/{CARD}/audit")
    audit = _api(served, token, f"/sessions/{CARD}/audit")
    statuses = [r["status"] for r in audit["records"]]
    assert "match" in statuses
    assert page.locator("table.audit tbody tr").count() == len(statuses)
    assert [page.locator("table.audit tbody tr").nth(i).get_attribute("data-status")
            for i in range(len(statuses))] == statuses
    assert page.locator('table.audit tr[data-status="match"] .status-match').count() >= 1
    # What if the card were cut at another level: the diff equals the Ledger's.
    policy["compression_level"] = "none"
    import json

    page.get_by_label(re.compile("^Policy")).fill(json.dumps(policy))
    page.get_by_role("button", name="Replay the timeline under it").click()
    page.wait_for_url(re.compile(r"policy="))
    with Ledger.open(served.url, load_vocabulary=False) as ledger:
        want = ledger.what_if(CARD, policy)
    assert want.changes
    assert page.locator("table.diff tbody tr").count() == len(want.changes)
    # Action changes and reason-only changes are counted and shown apart.
    actions = [c for c in want.changes if c.old_action != c.new_action]
    reasons = [c for c in want.changes if c.old_action == c.new_action]
    assert actions and reasons
    assert page.locator("#whatif-summary").inner_text().startswith(
        f"{len(actions)} decisions change action, {len(reasons)} only their reason (")
    for group, rows in (("action", actions), ("reason", reasons)):
        table = page.locator(f'table.diff[data-changes="{group}"]')
        assert table.locator("tbody tr").count() == len(rows)
        olds = table.locator("td.old").all_inner_texts()
        news = table.locator("td.new").all_inner_texts()
        assert all((o.split()[0] == n.split()[0]) == (group == "reason")
                   for o, n in zip(olds, news, strict=True))
    _shot(page, "audit", backend)
    page.get_by_label(re.compile("^Policy")).fill("{not json")
    page.get_by_role("button", name="Replay the timeline under it").click()
    assert "policy" in page.get_by_role("alert").inner_text()


def test_scope_page_sessions_and_usage_sparklines(served: Served, browser: Any,
                                                  backend: str) -> None:
    token = make_key(served.url, ["user-mara"], read_only=True)
    page = _page(browser, served, token)
    assert page.title() == "Scopes · ctxledger"  # the tab: no markup of the page in it
    _shot(page, "scopes", backend)
    page.get_by_role("link", name="user-mara").click()
    page.wait_for_url(re.compile(r"/ui/scopes/user-mara$"))
    assert page.locator("table.sessions tbody tr").all_inner_texts()[0].startswith(CARD)
    usage = _api(served, token, "/scopes/user-mara/usage", days=30)
    for figure in ("appended", "sessions", "assemblies", "tokens"):
        row = page.locator(f'tr[data-figure="{figure}"]')
        assert row.get_by_test_id("total").inner_text() == str(
            sum(day[figure] for day in usage["days"]))
        assert row.locator("svg.sparkline polyline").count() == 1
    _shot(page, "scope", backend)


@pytest.mark.parametrize("profile", sorted(OTHERS))
def test_other_profiles_breakdowns(served: Served, browser: Any, backend: str,
                                   profile: str) -> None:
    session, scope = OTHERS[profile]
    token = make_key(served.url, [scope], read_only=True)
    page = _page(browser, served, token)
    page.goto(f"/ui/sessions/{session}?profile={profile}")
    api = _api(served, token, f"/sessions/{session}/assemble", profile=profile)
    report = api["report"]
    assert page.get_by_test_id("total-tokens").inner_text() == str(api["tokens"]["total"])
    if profile == "novel":
        assert page.get_by_test_id("novel-stats").inner_text() == report["stats"]
        assert page.get_by_test_id("tier-tokens").all_inner_texts() == [
            str(t["tokens"]) for t in report["tiers"]]
        assert page.locator("ol.sandwich > li").count() == 4
    elif profile == "brief":
        assert page.locator("table.snippets tbody tr").count() == len(report["snippets"])
    else:
        names = page.locator("table.tools tbody tr td:nth-child(2)").all_inner_texts()
        assert names == [t["name"] for t in report["tools"]]
    _shot(page, f"session-{profile}", backend)


def test_timeline_pages_partition_the_steps_and_end_at_the_last() -> None:
    """Every step is on exactly one page; a page is at most STEP_PAGE steps; the default
    page (the last step's) ends at the last step; the page before a page ends right
    before it (the "earlier steps" link)."""
    from ctxledger._service.ui._pages import STEP_PAGE, step_page

    for total in (1, STEP_PAGE - 1, STEP_PAGE, STEP_PAGE + 1, 5 * STEP_PAGE // 2, 1_000):
        pages = {step_page(number, total) for number in range(1, total + 1)}
        assert sorted(n for page in pages for n in page) == list(range(1, total + 1))
        assert all(0 < len(page) <= STEP_PAGE for page in pages)
        assert step_page(total, total)[-1] == total
        for page in pages:
            assert all(step_page(n, total) == page for n in page)
            if page.start > 1:
                assert step_page(page.start - 1, total)[-1] == page.start - 1


def test_a_window_of_the_timeline_has_the_whole_timelines_markers_and_sizes(
        served: Served) -> None:
    with Ledger.open(served.url, load_vocabulary=False) as ledger:
        whole = ledger.timeline_chart(LORE)
        total = ledger.timeline_length(LORE)
        assert total == len(whole.steps) == whole.total_steps
        for first, last in ((1, 2), (3, 5), (total - 1, total)):
            part = ledger.timeline_chart(LORE, steps=range(first, last + 1))
            assert part.total_steps == total
            assert part.steps == whole.steps[first - 1:last]
            assert part.markers == tuple(m for m in whole.markers if first <= m.step <= last)
