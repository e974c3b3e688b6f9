"""A ledger first opened inside ``freezegun.freeze_time``, as users write time-travel tests.

Every job runs in a fresh interpreter, so no import made by an earlier test (or by this
one's own process) hides a failure that only shows when ctxledger, pydantic or the
assembler's models are first loaded under a frozen clock. Styles:

- ``context``: ctxledger is imported inside ``with freeze_time(...)``;
- ``import-before``: imported before the freeze, the ledger opened inside it;
- ``tick``: ``freeze_time(..., tick=True)``, the clock running from the frozen instant;
- ``move_to``: time moved with ``frozen.move_to()`` instead of ``tick()``;
- ``decorator``: ``@freeze_time(..., as_kwarg=...)`` on the function that first imports it.

The pytest plugin's fixtures get the same styles in a pytest run of their own.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

STYLES = ("context", "import-before", "tick", "move_to", "decorator")
JOBS = ("open", "assemble", "replay", "why", "audit", "rollup")
START = "2026-03-02T10:00:00+00:00"

# One script for every (style, job): argv gives both. Each job prints one JSON line of
# facts that only hold if the frozen clock decided the times.
SCRIPT = textwrap.dedent('''
    import json, sys
    from datetime import datetime, timedelta, timezone
    STYLE, JOB, URL = sys.argv[1:4]
    START = datetime.fromisoformat(%(start)r)
    from freezegun import freeze_time
    if STYLE == "import-before":
        import ctxledger._ledger  # noqa: F401  (loaded outside the freeze)

    def advance(frozen, offset):
        """Move the frozen clock to START + offset (tick=True runs a little ahead)."""
        if STYLE == "move_to":
            frozen.move_to(START + offset)
        else:
            now = datetime.now(timezone.utc)
            frozen.tick(START + offset - now)

    def card_session(ledger, frozen):
        ledger.append("s", [{"type": "session.started", "data": {"scope": "u"}}],
                      expected_version=0)
        ledger.append("s", [{"type": "card.set", "data": {
            "name": "Ada", "description": "A keeper.", "mes_example": "<START> hi"}}])
        ledger.append("s", [{"type": "setting.changed", "data": {
            "key": "compression_level", "value": "chat_dialogue"}}])
        for i in range(6):
            advance(frozen, timedelta(minutes=i + 1))
            ledger.append("s", [{"type": "message.appended",
                                 "data": {"role": "user", "content": f"m{i}"}}])

    def body(frozen):
        from ctxledger import Ledger
        out = {}
        with Ledger.open(URL) as ledger:
            if JOB == "rollup":
                ledger.append("s", [{"type": "session.started", "data": {"scope": "u"}}])
                for i in range(3):
                    ledger.append("s", [{"type": "tool.used", "data": {"tool_name": "Bash"}}])
                advance(frozen, timedelta(days=2))
                report = ledger.rollup()
                out["days"] = [day.day for day in report.rolled]
                usage = ledger.usage("u", days=7)
                out["tool_uses"] = sum(day.tool_uses for day in usage.days)
            else:
                card_session(ledger, frozen)
                times = [e.recorded_at for e in ledger.events("s")]
                out["last_minutes"] = round((times[-1] - START).total_seconds() / 60)
            if JOB == "open":
                out["messages"] = ledger.state("s")["messages"]["total"]
            elif JOB == "assemble":
                a = ledger.assemble("s", profile="card")
                out["now_minutes"] = round((a.now - START).total_seconds() / 60)
                out["mes_example"] = a.decision("mes_example").action
            elif JOB == "replay":
                third = [e.position for e in ledger.events("s")][5]
                out["replayed"] = ledger.replay("s", until=third).decision("mes_example").action
            elif JOB == "why":
                report = ledger.why("s", "mes_example")
                out["actions"] = [run.action for run in report.runs]
            elif JOB == "audit":
                ledger.record_assembly("s", ledger.assemble("s", profile="card"))
                out["verdicts"] = [entry.status for entry in ledger.audit("s").entries]
        print(json.dumps(out))

    if STYLE == "decorator":
        @freeze_time(START, as_kwarg="frozen")
        def run(frozen):
            body(frozen)
        run()
    else:
        with freeze_time(START, tick=STYLE == "tick") as frozen:
            body(frozen)
''') % {"start": START}

# ``why``: included before the level is set (compression off), included below the count,
# then expired at message 5.
EXPECTED: dict[str, dict[str, object]] = {
    "open": {"last_minutes": 6, "messages": 6},
    "assemble": {"last_minutes": 6, "now_minutes": 6, "mes_example": "expired"},
    "replay": {"last_minutes": 6, "replayed": "included"},
    "why": {"last_minutes": 6, "actions": ["included", "included", "expired"]},
    "audit": {"last_minutes": 6, "verdicts": ["match"]},
    "rollup": {"days": ["2026-03-02", "2026-03-03"], "tool_uses": 3},
}

PLUGIN_TESTS = textwrap.dedent('''
    from datetime import datetime, timedelta, timezone
    from freezegun import freeze_time

    START = datetime(2026, 3, 2, 10, tzinfo=timezone.utc)

    def _turns(ledger, events, frozen, move):
        ledger.append("s", [events.session_started(scope="u"),
                            events.card_set(name="Ada", mes_example="<START> hi"),
                            events.setting("compression_level", "chat_dialogue")])
        for i in range(5):
            move(frozen, timedelta(minutes=i + 1))
            ledger.append("s", [events.message(f"m{i}")])
        return ledger.assemble("s", profile="card")

    def _tick(frozen, offset):
        frozen.tick(START + offset - datetime.now(timezone.utc))

    def _move(frozen, offset):
        frozen.move_to(START + offset)

    NESTED = []

    def _nested(_frozen, offset):
        # Under the decorator the time moves by freezes nested inside it.
        NESTED.append(freeze_time(START + offset))
        NESTED[-1].start()

    @freeze_time(START)
    def test_decorator(ctxledger_ledger, ctxledger_events, ctxledger_assert_decisions):
        try:
            a = _turns(ctxledger_ledger, ctxledger_events, None, _nested)
        finally:
            while NESTED:
                NESTED.pop().stop()
        ctxledger_assert_decisions(a, {"mes_example": "expired"})
        assert a.now == START + timedelta(minutes=5)

    def test_context(ctxledger_ledger, ctxledger_events, ctxledger_assert_decisions):
        with freeze_time(START) as frozen:
            a = _turns(ctxledger_ledger, ctxledger_events, frozen, _tick)
        ctxledger_assert_decisions(a, {"mes_example": "expired"})
        assert a.now == START + timedelta(minutes=5)

    def test_tick(ctxledger_ledger, ctxledger_events, ctxledger_assert_decisions):
        with freeze_time(START, tick=True) as frozen:
            a = _turns(ctxledger_ledger, ctxledger_events, frozen, _tick)
        ctxledger_assert_decisions(a, {"mes_example": "expired"})
        assert timedelta(0) <= a.now - (START + timedelta(minutes=5)) < timedelta(minutes=1)

    def test_move_to(ctxledger_ledger, ctxledger_events, ctxledger_assert_decisions):
        with freeze_time(START) as frozen:
            a = _turns(ctxledger_ledger, ctxledger_events, frozen, _move)
            times = [e.recorded_at for e in ctxledger_ledger.events("s")]
        ctxledger_assert_decisions(a, {"mes_example": "expired"})
        assert times[-1] == START + timedelta(minutes=5)
''')


def _environment() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    env["PYTHONHASHSEED"] = "0"
    return env


def _run_job(style: str, job: str, workdir: Path) -> subprocess.CompletedProcess[str]:
    script = workdir / "job.py"
    if not script.exists():
        script.write_text(SCRIPT, encoding="utf-8")
    url = f"sqlite:///{workdir / f'{style}-{job}.db'}"
    return subprocess.run([sys.executable, str(script), style, job, url], cwd=workdir,
                          capture_output=True, text=True, timeout=180, env=_environment())


@pytest.fixture(scope="module")
def job_results(tmp_path_factory: pytest.TempPathFactory
                ) -> Iterator[dict[tuple[str, str], subprocess.CompletedProcess[str]]]:
    """Every (style, job) run once, two at a time (the machine has two cores)."""
    workdir = tmp_path_factory.mktemp("frozen")
    (workdir / "job.py").write_text(SCRIPT, encoding="utf-8")
    pairs = [(style, job) for style in STYLES for job in JOBS]
    with ThreadPoolExecutor(max_workers=2) as pool:
        done = list(pool.map(lambda pair: _run_job(*pair, workdir), pairs))
    yield dict(zip(pairs, done, strict=True))


@pytest.mark.parametrize("job", JOBS)
@pytest.mark.parametrize("style", STYLES)
def test_job_under_a_frozen_clock(
        job_results: dict[tuple[str, str], subprocess.CompletedProcess[str]],
        style: str, job: str) -> None:
    """The job works in a fresh process when the ledger is first opened frozen, and the
    frozen clock (not the wall clock) decided every recorded time."""
    result = job_results[(style, job)]
    assert result.returncode == 0, result.stderr[-3000:]
    facts = json.loads(result.stdout.strip().splitlines()[-1])
    assert facts == EXPECTED[job]


@pytest.mark.parametrize("name", ["test_decorator", "test_context", "test_tick",
                                  "test_move_to"])
def test_plugin_fixtures_under_a_frozen_clock(tmp_path: Path, name: str) -> None:
    """The pytest plugin's fixtures in a fresh pytest run: ctxledger is first imported by
    the fixtures of a test that freezes the clock itself (decorator or ``with``)."""
    (tmp_path / "test_user_app.py").write_text(PLUGIN_TESTS, encoding="utf-8")
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         f"test_user_app.py::{name}"],
        cwd=tmp_path, capture_output=True, text=True, timeout=180, env=_environment())
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert "1 passed" in result.stdout
