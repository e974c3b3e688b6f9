"""A writer process for the concurrency and crash tests.

Run as ``python tests/helpers/writer.py URL STREAM [STREAM...] --batches N --batch-size K``.
It opens the ledger, prints ``{"ready": true}``, and (with ``--wait-for-go``) waits for a
line on stdin so that several writers start together. Before each append it prints
``{"intent": ...}`` with the batch's event ids and after the commit ``{"ack": ...}`` with
the positions, so a parent that kills it knows exactly what was acknowledged.
``--batches 0`` writes until the process is killed. ``--ack-file`` also appends each
acknowledgement to a file and fsyncs it before the next append, so what it holds was
acknowledged even if the process is killed at once. ``--race N`` instead tries N times to
append one event to the first stream at the version it just read, reporting each
``{"race": {"version", "won"}}``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import uuid
from typing import Any

from ctxledger import ConcurrencyError, Ledger


def emit(record: dict[str, Any]) -> None:
    """Write one JSON line and flush it at once, so a kill -9 loses nothing printed."""
    sys.stdout.write(json.dumps(record, sort_keys=True) + "\n")
    sys.stdout.flush()


def event_id(tag: str, stream: str, serial: int) -> str:
    """A deterministic event id, unique per (run tag, stream, serial)."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"ctxledger-test/{tag}/{stream}/{serial}"))


def make_event(tag: str, stream: str, serial: int, mixed: bool) -> dict[str, Any]:
    """The ``serial``-th event of ``stream``: a message, or with ``mixed`` a varied type."""
    ident = event_id(tag, stream, serial)
    message = {"type": "message.appended", "id": ident,
               "data": {"role": ("user", "assistant")[serial % 2],
                        "content": f"{stream} #{serial}", "message_id": f"{tag}-m{serial}"}}
    if not mixed:
        return message
    kind = serial % 5
    if kind == 1 and serial > 3:
        # serial - 1 has kind 0: a message, retracted once (the store refuses anything else)
        return {"type": "message.retracted", "id": ident,
                "data": {"message_id": f"{tag}-m{serial - 1}"}}
    if kind == 2:
        return {"type": "tool.used", "id": ident,
                "data": {"tool_name": f"tool-{serial % 3}", "ok": serial % 2 == 0}}
    if kind == 3:
        return {"type": "chapter.moved", "id": ident, "data": {"chapter": 1 + serial % 4}}
    return message


def main(argv: list[str] | None = None) -> int:
    """Append batches as told and report every intent and acknowledgement on stdout."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("url")
    parser.add_argument("streams", nargs="+")
    parser.add_argument("--batches", type=int, required=True, help="0 means until killed")
    parser.add_argument("--batch-size", type=int, default=10,
                        help="events per batch; 0 cycles through sizes 1..7")
    parser.add_argument("--tag", default="w", help="makes event ids unique per run")
    parser.add_argument("--mixed", action="store_true", help="vary the event types")
    parser.add_argument("--wait-for-go", action="store_true")
    parser.add_argument("--ack-file", help="also append each ack here, fsynced")
    parser.add_argument("--race", type=int, default=0,
                        help="race on expected_version this many times instead")
    args = parser.parse_args(argv)
    ack_fd = (os.open(args.ack_file, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
              if args.ack_file else None)

    with Ledger.open(args.url) as ledger:
        serials = {stream: 0 for stream in args.streams}
        emit({"ready": True})
        if args.wait_for_go:
            sys.stdin.readline()
        if args.race:
            race(ledger, args.streams[0], args.tag, args.race)
            return 0
        counter = itertools.count() if args.batches == 0 else range(args.batches)
        for n in counter:
            stream = args.streams[n % len(args.streams)]
            size = args.batch_size or 1 + n % 7
            batch = []
            for _ in range(size):
                serials[stream] += 1
                batch.append(make_event(args.tag, stream, serials[stream], args.mixed))
            ids = [e["id"] for e in batch]
            emit({"intent": {"stream": stream, "ids": ids}})
            result = ledger.append(stream, batch)
            ack = {"stream": stream, "ids": ids, "positions": list(result.positions),
                   "version": result.stream_version}
            if ack_fd is not None:
                os.write(ack_fd, (json.dumps(ack, sort_keys=True) + "\n").encode())
                os.fsync(ack_fd)
            emit({"ack": ack})
    return 0


def race(ledger: Ledger, stream: str, tag: str, attempts: int) -> None:
    """Append one event at a time at the version just read; report wins and losses."""
    for attempt in range(attempts):
        version = ledger.log.stream_version(stream)
        event = {"type": "message.appended", "id": event_id(tag, stream, attempt),
                 "data": {"role": "user", "content": f"{tag} try {attempt}"}}
        try:
            ledger.append(stream, [event], expected_version=version)
        except ConcurrencyError:
            emit({"race": {"version": version + 1, "won": False}})
        else:
            emit({"race": {"version": version + 1, "won": True, "id": event["id"]}})


if __name__ == "__main__":
    raise SystemExit(main())
