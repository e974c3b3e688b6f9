"""The browser view's pages: each route asks the ``Ledger`` and renders a template.

Nothing here decides anything: the breakdowns are the profiles' reports, the timeline
and its markers ``Ledger.timeline_chart``, ``why``, the audit and the what-if the
Ledger's own. A key sees a session of another scope as no session at all (404), exactly as
the JSON API answers; every page is read-only, so a read-only key sees all of them.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from jinja2 import Environment, FileSystemLoader, select_autoescape

import ctxledger
from ctxledger._ledger import Ledger
from ctxledger._open import explain, one_line
from ctxledger._service.auth import ledger_of, require_scope, session_scope
from ctxledger._service.keys import ApiKey
from ctxledger._service.limits import cancel_of, slots_of
from ctxledger._service.problems import Problem
from ctxledger._service.ui import _charts, _forms, _login
from ctxledger.assembler.model import KEPT_ACTIONS, ContextMessage
from ctxledger.assembler.profiles import profile_names
from ctxledger.store.clock import format_utc
from ctxledger.store.errors import LedgerError

HERE = Path(__file__).parent
USAGE_DAYS = 30
# The browser may run nothing but our own files: no inline script, nothing from elsewhere.
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; "
                               "img-src 'self'; connect-src 'self'; form-action 'self'; "
                               "frame-ancestors 'none'; base-uri 'none'",
    # same-origin, not no-referrer: with no-referrer a browser posts our forms with
    # "Origin: null", which the form guard must refuse.
    "X-Content-Type-Options": "nosniff", "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store"}

router = APIRouter(prefix=_login.PREFIX, include_in_schema=False)
ProfileQuery = Annotated[str | None, Query()]


def _content(message: ContextMessage) -> str:
    """A message's content as text (non-text parts as ``[kind]``)."""
    if message.content is None:
        return ""
    if isinstance(message.content, str):
        return message.content
    parts: list[str] = []
    for part in message.content:
        data = part.model_dump()
        parts.append(str(data.get("text") or f"[{data.get('type', 'part')}]"))
    return "\n".join(parts)


def _environment() -> Environment:
    env = Environment(loader=FileSystemLoader(HERE / "templates"),
                      autoescape=select_autoescape(default=True, default_for_string=True),
                      trim_blocks=True, lstrip_blocks=True)
    env.filters["utc"] = lambda value: format_utc(value) if isinstance(value, datetime) else ""
    env.filters["content"] = _content
    env.filters["json"] = lambda value: json.dumps(value, indent=2, sort_keys=True)
    env.globals.update(kept=KEPT_ACTIONS, version=ctxledger.__version__,
                       profiles=profile_names(), prefix=_login.PREFIX,
                       form_token=_forms.form_token)
    return env


_env = _environment()


def render(name: str, code: int = 200, **context: Any) -> HTMLResponse:
    """Template ``name`` as an HTML response with the view's security headers."""
    html = _env.get_template(name).render(**context)
    return HTMLResponse(html, status_code=code, headers=SECURITY_HEADERS)


Page = Callable[[Ledger, ApiKey], HTMLResponse]


def _page(request: Request, build: Page) -> Response:
    """The page ``build`` makes for the logged-in key; the login form without one; an
    error page (the API's status and one line) for a refused request."""
    key = _login.logged_in(request)
    if key is None:
        return _login.to_login(request)
    try:
        return build(ledger_of(request), key)
    except Problem as exc:
        return render("error.html", exc.status, key=key, status=exc.status,
                      detail=exc.detail)
    except LedgerError as exc:
        return render("error.html", 400, key=key, status=400,
                      detail=explain(exc) or one_line(str(exc)))


# -- login ----------------------------------------------------------------------------------

@router.get("/login")
def login_form(next: str | None = None) -> HTMLResponse:
    """The form that takes an API key."""
    return render("login.html", next=_login.safe_next(next), error=None)


@router.post("/login")
async def login(request: Request) -> Response:
    """Check the posted key; set the login cookie and go on, or show the form again."""
    form = await _login.read_form(request)
    done = _login.log_in(request, form.get("token", ""), form.get("next", ""))
    if done is not None:
        return done
    return render("login.html", 401, next=_login.safe_next(form.get("next")),
                  error="The API key is unknown or revoked.")


@router.post("/logout")
def logout() -> Response:
    """Forget the login."""
    return _login.log_out()


# -- pages ------------------------------------------------------------------------------------

@router.get("/")
def index(request: Request) -> Response:
    """The key's scopes."""
    def build(ledger: Ledger, key: ApiKey) -> HTMLResponse:
        return render("index.html", key=key, scopes=key.scopes)
    return _page(request, build)


@router.get("/scopes/")
def open_scope(scope: Annotated[str, Query(min_length=1, max_length=200)]) -> Response:
    """The index's form: to the scope's page."""
    return RedirectResponse(f"{_login.PREFIX}/scopes/{quote(scope, safe='')}", 303)


@router.get("/sessions/")
def open_session(session: Annotated[str, Query(min_length=1, max_length=200)]) -> Response:
    """The index's form: to the session's page."""
    return RedirectResponse(f"{_login.PREFIX}/sessions/{quote(session, safe='')}", 303)


@router.get("/scopes/{scope}")
def scope_page(request: Request, scope: str) -> Response:
    """The scope's sessions and its daily usage as sparklines."""
    def build(ledger: Ledger, key: ApiKey) -> HTMLResponse:
        require_scope(key, scope)
        usage = ledger.usage(scope, days=USAGE_DAYS)
        names = ["appended", "sessions", "tool_uses", "assemblies", "tokens"]
        if usage.models:  # what providers billed, when any call was reported
            names += ["calls", "billed_input", "billed_output"]
        series = [(name, [getattr(day, name) for day in usage.days]) for name in names]
        lines = [(name.replace("_", " "), sum(values), values[-1] if values else 0,
                  _charts.sparkline(values, label=f"{name.replace('_', ' ')} per day, "
                                    f"last {len(values)} days"))
                 for name, values in series]
        tools = [(s.name, s.total, _charts.sparkline(s.daily, label=f"{s.name} uses per day"))
                 for s in usage.tools]
        return render("scope.html", key=key, scope=scope, sessions=ledger.sessions(scope),
                      usage=usage, lines=lines, tools=tools)
    return _page(request, build)


def _session_context(ledger: Ledger, key: ApiKey, session: str,
                     profile: str | None) -> dict[str, Any]:
    scope = session_scope(ledger, key, session)
    chosen = ledger.profile_of(session, profile).name
    return {"key": key, "session": session, "scope": scope, "profile": chosen}


@router.get("/sessions/{session}")
def session_page(request: Request, session: str, profile: ProfileQuery = None,
                 all: Annotated[bool, Query()] = False) -> Response:
    """The session's context now: the token breakdown, the messages, the warnings."""
    def build(ledger: Ledger, key: ApiKey) -> HTMLResponse:
        context = _session_context(ledger, key, session, profile)
        assembly = ledger.assemble(session, context["profile"])
        return render("session.html", **context, assembly=assembly, tab="context",
                      heading="Context now", step=None, everything=all)
    return _page(request, build)


@router.get("/sessions/{session}/timeline")
def timeline_page(request: Request, session: str, profile: ProfileQuery = None,
                  step: Annotated[int | None, Query()] = None,
                  all: Annotated[bool, Query()] = False) -> Response:
    """The decision timeline: tokens per section at each step, markers, and the assembly
    of the step picked (the last one by default)."""
    def build(ledger: Ledger, key: ApiKey) -> HTMLResponse:
        context = _session_context(ledger, key, session, profile)
        with slots_of(request).hold(key.key_id):
            return timeline(ledger, context)

    def timeline(ledger: Ledger, context: dict[str, Any]) -> HTMLResponse:
        chosen = context["profile"]
        total = ledger.timeline_length(session, profile=chosen)
        if total == 0:
            return render("timeline.html", **context, chart=None, tab="timeline",
                          svg=None, legend=[], picked=None, assembly=None)
        number = total if step is None else step
        if not 1 <= number <= total:
            raise Problem(404, f"the timeline has steps 1 to {total}, not {number}")
        page = step_page(number, total)
        chart = ledger.timeline_chart(session, profile=chosen,
                                      steps=None if total <= STEP_PAGE else page,
                                      cancel=cancel_of(request))
        picked = chart.steps[number - page.start]
        assembly = ledger.replay(session, picked.position, profile=context["profile"])
        href = f"?profile={quote(context['profile'])}&step="
        base = f"{_login.PREFIX}/sessions/{quote(session, safe='')}/why?profile=" \
               f"{quote(context['profile'])}&item="
        return render("timeline.html", **context, chart=chart, tab="timeline",
                      svg=_charts.timeline_svg(
                          chart, href=href, selected=number,
                          why_href=lambda item: base + quote(item, safe="")),
                      legend=_charts.legend(chart), picked=picked, assembly=assembly,
                      step=picked, everything=all)
    return _page(request, build)


@router.get("/sessions/{session}/why")
def why_page(request: Request, session: str,
             item: Annotated[str, Query(min_length=1, max_length=1000)],
             profile: ProfileQuery = None,
             fragment: Annotated[bool, Query()] = False) -> Response:
    """Why ``item`` was kept or dropped at each step (a whole page, or the panel's part)."""
    def build(ledger: Ledger, key: ApiKey) -> HTMLResponse:
        context = _session_context(ledger, key, session, profile)
        with slots_of(request).hold(key.key_id):
            report = ledger.why(session, item, profile=context["profile"],
                                cancel=cancel_of(request))
        return render("why_fragment.html" if fragment else "why.html", **context,
                      report=report, tab="why")
    return _page(request, build)


@router.get("/sessions/{session}/audit")
def audit_page(request: Request, session: str, profile: ProfileQuery = None,
               policy: Annotated[str | None, Query(max_length=100_000)] = None) -> Response:
    """Each recorded assembly derived again (match, mismatch, older format), and the
    decisions that would change under another policy (a what-if)."""
    def build(ledger: Ledger, key: ApiKey) -> HTMLResponse:
        context = _session_context(ledger, key, session, profile)
        current = ledger.policy(session, context["profile"]).model_dump(mode="json")
        what_if, error = None, None
        with slots_of(request).hold(key.key_id):
            report = ledger.audit(session, cancel=cancel_of(request))
            if policy is not None and policy.strip():
                try:
                    what_if = ledger.what_if(session, policy, cancel=cancel_of(request))
                except LedgerError as exc:  # a bad policy is shown by its form
                    error = explain(exc) or one_line(str(exc))
        return render("audit.html", 400 if error else 200, **context, report=report,
                      tab="audit", what_if=what_if, error=error,
                      policy_text=policy if policy else json.dumps(current, indent=2))
    return _page(request, build)


STEP_PAGE = 100
"""Steps the timeline page draws at once: every step of a timeline up to this many, else
the page of them that holds the step picked (the last 100 steps, the 100 before them,
...), with links to the pages before and after. The timeline is one fold whatever the
page; a page bounds the assemblies one request makes (a step without a context limit is
an assembly of the whole session at that point), so a page of a long session still
answers within the request's time limit."""


def step_page(number: int, total: int) -> range:
    """The page of steps that holds step ``number`` of ``total``: pages end at the last
    step (the default page), then every ``STEP_PAGE`` steps before it; the first page
    holds what is left."""
    end = total - (total - number) // STEP_PAGE * STEP_PAGE
    return range(max(1, end - STEP_PAGE + 1), end + 1)


HEAD_ROWS = 20
TAIL_ROWS = 180
"""A long list shows its first and last rows (a card's memory, the summary, the newest
turns: where a prompt goes wrong) and says how many it left out; ``?all=1`` shows all.
Two thousand messages of HTML would cost the page more than the assembly does."""


@dataclass(frozen=True, slots=True)
class Window:
    """The rows of a long list a page shows: ``head``, then ``hidden`` left out, ``tail``."""

    head: Sequence[Any]
    hidden: int
    tail: Sequence[Any]
    start: int
    """The 0-based index of ``tail``'s first row in the whole list."""


def window(rows: Sequence[Any], everything: bool) -> Window:
    """The first ``HEAD_ROWS`` and last ``TAIL_ROWS`` of ``rows`` (all when short or asked)."""
    if everything or len(rows) <= HEAD_ROWS + TAIL_ROWS:
        return Window(rows, 0, (), len(rows))
    start = len(rows) - TAIL_ROWS
    return Window(rows[:HEAD_ROWS], start - HEAD_ROWS, rows[start:], start)


_env.globals["window"] = window
