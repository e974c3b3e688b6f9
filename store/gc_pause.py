"""The cyclic garbage collector paused around work that allocates many acyclic objects."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def cyclic_gc_paused() -> Iterator[None]:
    """The cyclic garbage collector paused for the block (then restored as it was).

    Decoding a whole stream, validating a large batch or folding a log allocates many
    dicts and records, and each allocation burst triggers collector passes that walk a
    growing heap and find nothing: none of that work makes reference cycles. Objects are
    still freed by reference counting; only cycles wait for the next pass after the
    block. Nested or concurrent uses are safe: only the outermost one that found the
    collector on turns it back on.
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
