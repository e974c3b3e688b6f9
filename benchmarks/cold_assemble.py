"""One cold assembly in a new process, for the ``cold`` leg (``legs_cold.py``).

    python benchmarks/cold_assemble.py URL SESSION PROFILE NOW

Prints one JSON object: milliseconds of ``Ledger.open`` and of the first ``assemble``,
the context's tokens and messages, and how many texts the tokenizer really counted.
Interpreter start and imports are outside both clocks: they are the same at every size.
"""

from __future__ import annotations

import json
import sys
import time
from datetime import datetime

from ctxledger import Ledger


def main(argv: list[str]) -> int:
    """Open, assemble once, print the figures."""
    url, session, profile, now = argv
    when = datetime.fromisoformat(now)
    start = time.perf_counter()
    ledger = Ledger.open(url)
    opened = time.perf_counter()
    try:
        assembly = ledger.assemble(session, profile, now=when)
        assembled = time.perf_counter()
        calls = ledger.tokenizer_calls()
    finally:
        ledger.close()
    history = getattr(assembly.report, "chat_history", None)
    print(json.dumps({
        "open_ms": (opened - start) * 1e3, "assemble_ms": (assembled - opened) * 1e3,
        "tokens": assembly.tokens.total, "messages": getattr(history, "messages", None),
        "tokenizer_calls": calls}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
