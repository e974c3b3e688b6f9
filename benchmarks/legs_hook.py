"""Hook leg: the wall time of a whole ``ctxledger hook`` process, as Claude Code runs it.

Claude Code starts the hook command once per event and waits for it, so the figure is a
new process each time, event on stdin, on a project database of 50,000 events (3,000
with ``--quick``): sessions of one project scope, each a start, prompts, tool uses over
a dozen MCP servers and builtins, and an end with a summary. ``PostToolUse`` (a new tool
call each run: it spools the tool use) and ``SessionStart`` (a new session each run: it
drains, then prints the injection) are the median of 15 runs (5 with ``--quick``), in
both configurations: as installed, where the database's warm worker (started in the
background by the first event, ``ctxledger._hook._worker``) drains and answers, and with
workers off (``CTXLEDGER_HOOK_WORKER_IDLE=0``), where each tool use starts a drainer and
each session start loads the database stack itself (also what the first event after the
worker's idle exit costs). After each tool use the leg waits, untimed, until the spool is
drained, as tool calls seconds apart would, then checks that every tool use reached the
log once. The hook runs from a wheel installed as users get it: the leg builds the wheel,
installs it into a fresh venv (its dependencies taken from this one's site-packages) and
times that venv's ``ctxledger`` script against that venv's ``python -c pass``, timed
after each tool use and started the same way (the event on stdin, pipes, the same
environment), so that both see the machine's load alike. The floors are measured
alongside: ``python -c pass`` for the tool use (its route imports only what Python loads
at start-up and a few C modules) and ``import sqlalchemy, pydantic`` for a session start
without a worker.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path
from typing import Any

from legs_startup import _environment
from registry import AtMost, AtMostTimesPeer, Comparison, Context, Measure, Reported, leg

FULL_EVENTS = 50_000
QUICK_EVENTS = 3_000
FULL_RUNS = 15
QUICK_RUNS = 5
PROJECT = "/bench/projects/webapp"
SCOPE = "webapp-bench"
SESSION_EVENTS = 500
TOOLS = (*(f"mcp__{server}__call" for server in (
    "github", "linear", "sentry", "postgres", "playwright", "figma", "slack", "notion",
    "stripe", "vercel", "docker", "jira")), "Read", "Edit", "Bash", "Grep")


def project_database(directory: Path, events: int) -> str:
    """A SQLite file holding ``events`` events of one project, written as the hook would
    have written them (sessions of ``SESSION_EVENTS``, in batches)."""
    from ctxledger import Ledger

    url = f"sqlite:///{directory / 'project.db'}"
    with Ledger.open(url, load_vocabulary=False) as ledger:
        ledger.append(f"scope:{SCOPE}", [
            {"type": "tool.registered",
             "data": {"name": name, "tool_type": "mcp_tool" if name.startswith("mcp__")
                      else "builtin"}} for name in TOOLS])
        written, number = len(TOOLS), 0
        while written < events:
            number += 1
            size = min(SESSION_EVENTS, events - written)
            batch: list[dict[str, Any]] = [
                {"type": "session.started", "data": {"scope": SCOPE}}]
            for index in range(size - 2):
                if index % 10 == 0:
                    batch.append({"type": "message.appended",
                                  "data": {"role": "user", "content": f"prompt {index}"}})
                else:
                    batch.append({"type": "tool.used", "data": {
                        "tool_name": TOOLS[(index * 7 + number) % len(TOOLS)],
                        "call_id": f"toolu_{number}_{index}"}})
            batch.append({"type": "session.ended",
                          "data": {"summary": f"Session {number}: shipped a fix."}})
            ledger.append(f"bench-{number}", batch[:size])
            written += size
    return url


ROOT = Path(__file__).resolve().parent.parent


def wheel_install(directory: Path) -> Path:
    """Build ctxledger's wheel and install it, alone, into a fresh venv under
    ``directory``; its dependencies come from this interpreter's site-packages (a path
    line: that folder's own ``.pth`` files, such as an editable install's, are not run).
    Returns the venv's ``bin`` folder."""
    wheels = directory / "wheels"
    subprocess.run([sys.executable, "-m", "build", "--wheel", "--no-isolation",
                    "--outdir", str(wheels), str(ROOT)], check=True, capture_output=True,
                   timeout=600)
    [wheel] = wheels.glob("ctxledger-*.whl")
    venv = directory / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=600)
    python = venv / "bin" / "python"
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install",
                    "--quiet", "--no-deps", "--no-index", str(wheel)], check=True,
                   capture_output=True, timeout=600)
    purelib = subprocess.run([str(python), "-c", "import sysconfig;"
                              " print(sysconfig.get_paths()['purelib'])"], check=True,
                             capture_output=True, text=True, timeout=120).stdout.strip()
    (Path(purelib) / "zz_ctxledger_dependencies.pth").write_text(
        sysconfig.get_paths()["purelib"] + "\n", encoding="utf-8")
    return venv / "bin"


def _hook_ms(cli: Path, url: str, events: list[dict[str, Any]], env: dict[str, str],
             settle: bool = False, floor: list[float] | None = None) -> Measure:
    """Median wall time of one ``ctxledger hook`` process per event; each must exit 0
    and print no error. With ``settle``, wait (untimed) until the spool is drained. With
    ``floor``, time ``python -c pass`` of the same venv after each event too, started the
    same way (stdin, pipes, environment), into ``floor``: on a loaded machine the two
    then see the same load."""
    values: list[float] = []
    for event in events:
        text = json.dumps(event)
        started = time.perf_counter()
        done = subprocess.run([str(cli), "--db", url, "hook"], input=text.encode(),
                              capture_output=True, env=env, check=False, timeout=120)
        values.append((time.perf_counter() - started) * 1000)
        if done.returncode != 0 or done.stderr:
            raise RuntimeError(f"hook failed: {done.stderr[-1000:]!r}")
        if settle:
            _settle(url, env)
        if floor is not None:
            started = time.perf_counter()
            subprocess.run([str(cli.parent / "python"), "-c", "pass"], input=text.encode(),
                           capture_output=True, env=env, check=True, timeout=120)
            floor.append((time.perf_counter() - started) * 1000)
    return Measure.median_of(values, "ms")


def _settle(url: str, env: dict[str, str]) -> None:
    """Wait until the spool is drained and every drainer of this run has exited (tool
    calls come seconds apart: a drainer still exiting would time the CPU, not the hook).
    The worker, which stays, is not waited for."""
    from ctxledger._hook._spool import Spool

    spool = Spool.of(url, env)
    marker = f"XDG_DATA_HOME={env['XDG_DATA_HOME']}\0".encode()
    deadline = time.monotonic() + 120
    while spool.path.exists() or spool.batches() or _drainers(marker):
        if time.monotonic() > deadline:
            raise RuntimeError("the hook's drainer did not drain the spool")
        time.sleep(0.005)


def _drainers(marker: bytes) -> int:
    """How many ``ctxledger hook --drain`` processes (not workers) with ``marker`` in
    their environment are alive (Linux: read from /proc)."""
    alive = 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as file:
                command = file.read().split(b"\0")
            if b"--drain" not in command or b"--worker" in command:
                continue
            with open(f"/proc/{pid}/environ", "rb") as file:
                alive += marker in file.read()
        except OSError:
            continue  # gone already, or not ours
    return alive


def _event(name: str, session: str, **fields: Any) -> dict[str, Any]:
    return {"session_id": session, "transcript_path": f"/nonexistent/{session}.jsonl",
            "cwd": PROJECT, "hook_event_name": name, **fields}


@leg("hook", "ctxledger hook from a wheel: process wall time per Claude Code event on 50k"
     " events")
def hook(ctx: Context) -> list[Comparison]:
    """Median process wall time of PostToolUse and SessionStart, with the warm worker and
    without, from an installed wheel."""
    from ctxledger._hook._worker import IDLE_ENV, Place, worker_alive

    quick = ctx.settings.quick
    runs = QUICK_RUNS if quick else FULL_RUNS
    events = QUICK_EVENTS if quick else FULL_EVENTS
    note = f"process wall time, median of {runs}; {events:,} events"
    found: list[Comparison] = []
    with ctx.fresh_dir("hook") as directory:
        url = project_database(directory, events)
        bin_folder = wheel_install(directory)
        cli, python = bin_folder / "ctxledger", bin_folder / "python"
        # A short data folder: the worker's Unix socket path must fit in about 100 bytes.
        data = Path(tempfile.mkdtemp(prefix="ctxh-", dir="/tmp"))
        base = {**_environment(), "CTXLEDGER_SCOPE": SCOPE, "XDG_DATA_HOME": str(data)}
        try:
            for idle, target in (("600", True), ("0", False)):
                env = {**base, IDLE_ENV: idle}
                # Untimed: the OS file cache; with workers on, this starts the worker.
                _hook_ms(cli, url, [_event("SessionStart", f"warm-{idle}")], env)
                if target:
                    deadline = time.monotonic() + 120
                    # Not asked from here: this process is another build, which a worker
                    # takes as its cue to leave.
                    while not (worker_alive(url, env) and Place.of(url, env).socket.exists()):
                        if time.monotonic() > deadline:
                            raise RuntimeError("the hook's worker did not start")
                        time.sleep(0.05)
                tool_uses = [_event("PostToolUse", f"live-{idle}",
                                    tool_name=TOOLS[run % len(TOOLS)],
                                    tool_use_id=f"toolu_live_{idle}_{run}", tool_input={},
                                    tool_response={}) for run in range(runs)]
                starts = [_event("SessionStart", f"new-{idle}-{run}", source="startup")
                          for run in range(runs)]
                passes: list[float] = []
                tool_ms = _hook_ms(cli, url, tool_uses, env, settle=True, floor=passes)
                start_ms = _hook_ms(cli, url, starts, env)
                pass_ms = Measure.median_of(passes, "ms")
                _check_drained(url, f"live-{idle}", [event["tool_use_id"]
                                                     for event in tool_uses])
                if target:
                    found += [
                        Comparison("hook", "PostToolUse, worker (spools; the worker drains),"
                                   " vs python -c pass of the same venv",
                                   tool_ms, "`python -c pass`", pass_ms,
                                   AtMostTimesPeer(2.0),
                                   f"{note}; `python -c pass` timed after each tool use"),
                        Comparison("hook", "SessionStart, worker (it drains and assembles)",
                                   start_ms, None, None, AtMost(150.0, "ms"), note)]
                    _stop_worker(cli, url, env)
                    deadline = time.monotonic() + 120
                    while worker_alive(url, env):
                        if time.monotonic() > deadline:
                            raise RuntimeError("the hook's worker did not stop")
                        time.sleep(0.05)
                else:
                    found += [
                        Comparison("hook", "PostToolUse, no worker (spools; a drainer"
                                   " process appends)", tool_ms, None, None, Reported(),
                                   note),
                        Comparison("hook", "SessionStart, no worker (drains, loads the"
                                   " stack, prints the injection)", start_ms, None, None,
                                   Reported(), note)]
        finally:
            _stop_worker(cli, url, {**base, IDLE_ENV: "600"})
            shutil.rmtree(data, ignore_errors=True)
        for label, code in (("floor: python -c pass", "pass"),
                            ("floor: python -c 'import sqlalchemy, pydantic'",
                             "import sqlalchemy, pydantic"),
                            ("floor: python -c 'import ctxledger._ledger' (the store,"
                             " the projections, their pydantic models)",
                             "import ctxledger._ledger")):
            floor = Measure.median_of([_floor_ms(python, code) for _ in range(runs)], "ms")
            found.append(Comparison("hook", label, floor, None, None, Reported(),
                                    "the same Python, median of the same number of runs"))
        return found


def _stop_worker(cli: Path, url: str, env: dict[str, str]) -> None:
    """``ctxledger hook --stop-worker`` of the installed wheel (a worker answers only its
    own build)."""
    subprocess.run([str(cli), "--db", url, "hook", "--stop-worker"], env=env,
                   capture_output=True, check=False, timeout=120)


def _check_drained(url: str, session: str, calls: list[str]) -> None:
    """Every timed tool use of ``session`` is in the log, once."""
    from ctxledger import Ledger

    with Ledger.open(url, load_vocabulary=False) as ledger:
        found = [event.data.get("call_id") for event in ledger.events(session)
                 if event.type == "tool.used"]
    if sorted(found) != sorted(calls):
        raise RuntimeError(f"the spooled tool uses did not reach the log once each: {found}")


def _floor_ms(python: Path, code: str) -> float:
    started = time.perf_counter()
    subprocess.run([str(python), "-c", code], check=True, env=_environment(), timeout=120)
    return (time.perf_counter() - started) * 1000
