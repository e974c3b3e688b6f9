"""Assertions shared by the tests: one-line errors (raised or printed by the CLI) and
"nothing was written"."""

from __future__ import annotations

from typing import Any

from typer.testing import Result

from ctxledger import Ledger
from helpers.tables import TableDump, dump_projections, raw_events

LedgerState = tuple[list[tuple[Any, ...]], TableDump]


def one_line(exc: BaseException) -> str:
    """The error's message, asserting it is a single non-empty line."""
    text = str(exc)
    assert text and "\n" not in text, f"message is not one line: {text!r}"
    return text


def ledger_state(ledger: Ledger) -> LedgerState:
    """Everything an append could change: every stored event and every projection row."""
    return raw_events(ledger), dump_projections(ledger)


def one_error_line(result: Result, *needles: str, internal: bool = False) -> str:
    """A CLI failure as users must see it: exit 1, exactly one ``error: `` line on stderr
    holding every needle, no traceback, and no "internal error" unless ``internal`` (a
    test that breaks the code on purpose). Returns the line."""
    assert result.exit_code == 1, (result.stdout, result.stderr)
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    assert internal or "internal error" not in result.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]
