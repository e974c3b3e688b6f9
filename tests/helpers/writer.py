"""A writer process for the concurrency and crash tests.

Run as ``python tests/helpers/writer.py URL STREAM [STREAM...] --batches N --batch-size K``.
It opens the ledger, prints ``{"ready": true}``, and (with ``--wait-for-go``) waits for a
line on stdin so that several writers start together. Before each append it prints
``{"intent": ...}`` with the batch's event ids and after the commit ``{"ack": ...}`` with
the positions, so a parent that kills it knows exactly what was acknowledged.
``--batches 0`` writes until the process is killed.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import uuid
from typing import Any

from ctxledger import Ledger


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
    args = parser.parse_args(argv)

    with Ledger.open(args.url) as ledger:
        serials = {stream: 0 for stream in args.streams}
        emit({"ready": True})
        if args.wait_for_go:
            sys.stdin.readline()
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
            emit({"ack": {"stream": stream, "ids": ids, "positions": list(result.positions),
                          "version": result.stream_version}})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
