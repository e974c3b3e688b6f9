"""Browser-view leg: the session page of a 2,000-message session renders on the server in <=
300 ms, and its timeline is built by one fold, not one replay per message.

One card session (``session.started``, ``card.set``, a compression setting, then 2,000
messages; the replay leg's session) in a SQLite log, and the same chat with a context
limit of 8,192 tokens (as a card app sets one). Without a limit all 2,000 messages are in
the context, so the page's time is mostly the assembly of 2,000 messages. The session page
is asked for through the real application in process (Starlette's test client: no socket,
so the figure is the server's work: the key check, the assembly and the template), logged
in through the login form as a browser is; the first answer warms the caches, the median
of the next ones is the figure. The timeline's figure counts the scratch stores the
timeline folds into (one: the fold runs once, each step only assembles) and times it
against one replay times the number of steps, which is what a replay per step would cost.
The timeline page draws a page of ``STEP_PAGE`` steps (every step of a shorter timeline);
its time is reported.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from fastapi.testclient import TestClient
from legs_append import ledger_url
from legs_replay import SESSION, _session_events, build
from registry import AtMost, Comparison, Context, Exactly, Measure, Reported, leg

from ctxledger import Ledger
from ctxledger._service.app import create_app
from ctxledger._service.keys import create_key, ui_login
from ctxledger._service.ui._login import COOKIE as LOGIN_COOKIE
from ctxledger._service.ui._pages import STEP_PAGE
from ctxledger.timetravel import _replay

MESSAGES = 2_000
QUICK_MESSAGES = 200
HEAD_EVENTS = 3  # session.started, card.set, the compression setting
PAGE_REPEATS = 15
LIMITED = "limited-chat"
"""The same chat with a context limit of 8,192 tokens (as a card app sets one): its
context holds the newest messages that fit, not all 2,000."""
CONTEXT_LIMIT = 8_192


def _limited(url: str, messages: int) -> None:
    events = _session_events(messages + HEAD_EVENTS)
    events.insert(HEAD_EVENTS, {"type": "setting.changed",
                                "data": {"key": "context_limit", "value": CONTEXT_LIMIT}})
    with Ledger.open(url, load_vocabulary=False) as ledger:
        for start in range(0, len(events), 500):
            ledger.append(LIMITED, events[start:start + 500])
QUICK_REPEATS = 3


class _FoldCounter:
    """Counts the scratch stores made while it is installed (one per fold)."""

    def __init__(self) -> None:
        self.count = 0
        self._original = _replay.ScratchProjections.__init__

    def __enter__(self) -> _FoldCounter:
        original = self._original

        def counting(scratch: Any) -> None:
            self.count += 1
            original(scratch)

        _replay.ScratchProjections.__init__ = counting  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: object) -> None:
        _replay.ScratchProjections.__init__ = self._original  # type: ignore[method-assign]


def _timed(call: Any) -> float:
    started = time.perf_counter()
    call()
    return (time.perf_counter() - started) * 1000.0


@leg("ui", "the browser view: a 2,000-message session page, and its timeline by one fold")
def ui_cost(ctx: Context) -> list[Comparison]:
    """The session page's median render time (<= 300 ms) and the timeline's folds (= 1)."""
    quick = ctx.settings.quick
    messages = QUICK_MESSAGES if quick else MESSAGES
    repeats = QUICK_REPEATS if quick else PAGE_REPEATS * ctx.settings.rounds
    with ctx.fresh_dir("ui") as directory:
        url = build(directory, messages + HEAD_EVENTS, messages + HEAD_EVENTS)
        assert url == ledger_url(directory)
        _limited(url, messages)
        with Ledger.open(url) as ledger:
            token = create_key(ledger.engine, ["replay-bench"], read_only=True)[1]
            # The login cookie the login form would set (the form itself needs a browser's
            # Origin and form token; its cost is not what this leg measures).
            login = ui_login(ledger.engine, token, ledger.clock())
            assert login is not None
        with TestClient(create_app(url), cookies={LOGIN_COOKIE: login[1]}) as http:
            path = f"/ui/sessions/{SESSION}"
            first = http.get(path)
            assert first.status_code == 200, first.text[:500]
            page = [_timed(lambda: http.get(path)) for _ in range(repeats)]
            limited_path = f"/ui/sessions/{LIMITED}"
            assert http.get(limited_path).status_code == 200
            limited = [_timed(lambda: http.get(limited_path)) for _ in range(repeats)]
            statuses: list[int] = []
            timeline_page = _timed(
                lambda: statuses.append(http.get(f"{path}/timeline").status_code))
        with Ledger.open(url) as ledger:
            with _FoldCounter() as folds:
                steps = len(ledger.timeline(SESSION, profile="card"))
            timeline = _timed(lambda: ledger.timeline(SESSION, profile="card"))
            one_replay = statistics.median(
                _timed(lambda: ledger.replay(SESSION, profile="card")) for _ in range(3))
    note = (f"one card session of {messages:,} messages, {steps:,} timeline steps; "
            f"page: median of {repeats} answers in process after one warm-up; "
            f"the timeline page answered {statuses[0]}")
    return [
        Comparison("ui", f"session page, {messages:,} messages, all in the context",
                   Measure.median_of(page, "ms"), None, None, AtMost(300, "ms"), note=note),
        Comparison("ui", f"session page, {messages:,} messages, context limit "
                         f"{CONTEXT_LIMIT:,}",
                   Measure.median_of(limited, "ms"), None, None, AtMost(300, "ms"),
                   note=note),
        Comparison("ui", f"timeline of {steps:,} steps: scratch folds",
                   Measure(folds.count, "folds"), None, None, Exactly(1, "folds"),
                   note=note),
        Comparison("ui", f"timeline of {steps:,} steps vs a replay per step",
                   Measure(timeline / 1000.0, "s"), f"{steps:,} x one replay",
                   Measure(one_replay * steps / 1000.0, "s"), Reported(), note=note),
        Comparison("ui", f"timeline page, {steps:,} steps (the last "
                         f"{min(steps, STEP_PAGE):,} drawn)",
                   Measure(timeline_page, "ms"), None, None, Reported(), note=note),
    ]
