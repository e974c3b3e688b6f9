"""Assertions shared by the store tests: one-line errors and "nothing was written"."""

from __future__ import annotations

from typing import Any

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
