"""Where a chat turn's time goes through ``ctxledger serve``: the service's own cost per
request against the same ``Ledger`` call in process.

    python benchmarks/profile_serve.py [--turns N] [--clients K]

One client takes a session through ``--turns`` turns of the ``serve`` leg (append the
user's message, ``GET /sessions/{s}/assemble?format=openai``, append the answer batch),
one request at a time, against a ``ctxledger serve`` child process on SQLite; the server's
CPU time around each request is read from ``/proc/<pid>/task/*/schedstat`` (every
thread's, in nanoseconds). The same three calls then run on an in-process ``Ledger``,
timed by this thread's CPU clock. The difference per request is what the service adds:
HTTP, routing, the key and scope checks, validation, the hops to a worker thread, the
response. Then ``--clients`` clients run at once, as the leg does: the server's CPU per
turn against the in-process ledger's (its Ledger opening included). The machine's other
load moves these figures: compare runs made back to back.
"""

from __future__ import annotations

import argparse
import glob
import resource
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import httpx
import legs_serve
from legs_append import ledger_url
from legs_turnloop import script

from ctxledger import Ledger

STEPS = ("user message", "assemble (openai)", "answer batch")


def server_cpu_ns(pid: int) -> int:
    """CPU time of every thread of process ``pid`` so far, ns."""
    total = 0
    for path in glob.glob(f"/proc/{pid}/task/*/schedstat"):
        with suppress(OSError, ValueError, IndexError):  # a thread that ended meanwhile
            total += int(Path(path).read_text().split()[0])
    return total


def through_service(turns: int) -> list[float]:
    """The server's CPU per step of a turn, ms (mean over ``turns``), one client."""
    spent = [0, 0, 0]
    with tempfile.TemporaryDirectory() as directory:
        url = ledger_url(Path(directory))
        token = legs_serve._open_sessions(url, "p", 1)
        with legs_serve._server(url) as server, httpx.Client(
                base_url=server.base, timeout=120.0,
                headers={"Authorization": f"Bearer {token}"}) as http:
            pid = server.proc.pid
            for number, turn in enumerate(script(turns), start=1):
                user = {"events": [legs_serve._user("p-0", number, turn)]}
                answer = {"events": legs_serve._answer("p-0", number, turn)}
                requests = (
                    partial(http.post, "/streams/p-0/events", json=user),
                    partial(http.get, "/sessions/p-0/assemble",
                            params={"profile": "card", "format": "openai"}),
                    partial(http.post, "/streams/p-0/events", json=answer))
                for step, send in enumerate(requests):
                    before = server_cpu_ns(pid)
                    legs_serve._ok(send())
                    spent[step] += server_cpu_ns(pid) - before
    return [ns / turns / 1e6 for ns in spent]


def in_process(turns: int) -> list[float]:
    """This thread's CPU per step of a turn, ms (mean over ``turns``), same calls."""
    spent = [0.0, 0.0, 0.0]
    with tempfile.TemporaryDirectory() as directory:
        url = ledger_url(Path(directory))
        legs_serve._open_sessions(url, "p", 1)
        with Ledger.open(url) as ledger:
            for number, turn in enumerate(script(turns), start=1):
                user = legs_serve._user("p-0", number, turn)
                answer = legs_serve._answer("p-0", number, turn)
                calls = (
                    partial(ledger.append, "p-0", user),
                    lambda: ledger.assemble("p-0", "card").to_openai(),
                    partial(ledger.append, "p-0", answer))
                for step, call in enumerate(calls):
                    before = time.thread_time()
                    call()
                    spent[step] += time.thread_time() - before
    return [s / turns * 1e3 for s in spent]


def clients_at_once(clients: int, turns: int) -> None:
    """``clients`` sessions at once, as the ``serve`` leg runs them: turns/s and CPU per
    turn of the server process, and of this process running them in process."""
    box: dict[str, int] = {}
    opened = legs_serve._server

    @contextmanager
    def measured(url: str, workers: int = 1, *options: str) -> Iterator[legs_serve.Server]:
        with opened(url, workers, *options) as server:
            box["start"] = server_cpu_ns(server.proc.pid)
            try:
                yield server
            finally:
                box["end"] = server_cpu_ns(server.proc.pid)

    legs_serve._server = measured
    try:
        steps = script(turns)
        with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
            http = legs_serve._through_server(ledger_url(Path(a)), steps, clients, "h")
            before = resource.getrusage(resource.RUSAGE_SELF)
            local = legs_serve._in_process(ledger_url(Path(b)), steps, clients, "l")
            after = resource.getrusage(resource.RUSAGE_SELF)
    finally:
        legs_serve._server = opened
    count = clients * turns
    local_cpu = (after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    print(f"{clients} clients at once, {turns} turns each:")
    print(f"  service     {http.turns_per_s:7.1f} turns/s, p50 {http.pct(0.5):6.1f} ms, "
          f"server CPU {(box['end'] - box['start']) / count / 1e6:6.2f} ms/turn")
    print(f"  in process  {local.turns_per_s:7.1f} turns/s, p50 {local.pct(0.5):6.1f} ms, "
          f"CPU {local_cpu / count * 1e3:6.2f} ms/turn (opening the Ledger included)")
    print(f"  ratio       {http.turns_per_s / local.turns_per_s:.2f}x turns/s")


def main() -> None:
    """Parse the options, run both measurements, print them."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=150, help="turns per client")
    parser.add_argument("--clients", type=int, default=legs_serve.CLIENTS,
                        help="clients at once in the second measurement (0: skip it)")
    options = parser.parse_args()
    served = through_service(options.turns)
    local = in_process(options.turns)
    print(f"one client, {options.turns} turns: CPU per request, ms")
    print(f"  {'request':<20} {'service':>8} {'in process':>11} {'added':>8}")
    for name, ours, theirs in zip(STEPS, served, local, strict=True):
        print(f"  {name:<20} {ours:8.2f} {theirs:11.2f} {ours - theirs:8.2f}")
    print(f"  {'turn':<20} {sum(served):8.2f} {sum(local):11.2f} "
          f"{sum(served) - sum(local):8.2f}")
    if options.clients > 0:
        clients_at_once(options.clients, options.turns)


if __name__ == "__main__":
    main()
