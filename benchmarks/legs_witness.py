"""Witness leg: what a file witness costs single appends on SQLite.

The mix's first ``--single`` events are appended one per transaction three ways, rounds
interleaved: without a witness; with a file witness sent a head after every commit (one
fsynced line each, the default); and with heads batched every 100 events
(``WitnessSettings(every=100)``). The bar, a witness adding at most 10% to single appends,
is the target; each configuration's ratio to the bare append is reported.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from legs_append import appending, interleaved, ledger_url, single_inputs, timed
from registry import AtLeastTimesPeer, Comparison, Context, leg

from ctxledger import Ledger, WitnessSettings

BATCHED = 100
"""Events per head in the batched configuration."""


def _appends(ctx: Context, label: str, inputs: Sequence[tuple[str, Any]],
             every: int | None) -> float:
    """Events per second of single appends, with a file witness every ``every`` events
    (None: no witness)."""
    write = appending(inputs)
    with ctx.fresh_dir(label) as directory:
        (directory / "db").mkdir()
        witness = "" if every is None else f"file://{Path(directory) / 'heads.log'}"
        with Ledger.open(ledger_url(directory / "db"), witness=witness,
                         witness_settings=WitnessSettings(every=every or 1)) as ledger:
            seconds = timed(lambda: write(ledger))
            assert ledger.head() == len(inputs)
        if every is not None:
            lines = (Path(directory) / "heads.log").read_text().count("\n")
            assert lines == -(-len(inputs) // every), lines
    return len(inputs) / seconds


@leg("witness", "single appends with a file witness (SQLite)")
def witness(ctx: Context) -> list[Comparison]:
    """Bare single appends vs a file witness after every commit vs every 100 events."""
    inputs = single_inputs(ctx.mix[:ctx.settings.single_events])
    got = interleaved(ctx, {
        "no witness": lambda: _appends(ctx, "witness-none", inputs, None),
        "every commit": lambda: _appends(ctx, "witness-every", inputs, 1),
        f"every {BATCHED}": lambda: _appends(ctx, "witness-batched", inputs, BATCHED),
    })
    note = (f"first {len(inputs):,} events of the mix, one append each; a head is one"
            " O_APPEND write and one fsync")
    return [
        Comparison("witness", "single appends, file witness after every commit",
                   got["every commit"], "no witness", got["no witness"],
                   AtLeastTimesPeer(1 / 1.1), note),
        Comparison("witness", f"single appends, file witness every {BATCHED} events",
                   got[f"every {BATCHED}"], "no witness", got["no witness"],
                   AtLeastTimesPeer(1 / 1.1)),
    ]
