"""Where the CLI draws: a rich console on stdout, and progress bars on stderr.

rich is imported when something is drawn, never at start-up.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress, TaskID

PIPE_WIDTH = 120
"""Width of text output written to a file or pipe when ``COLUMNS`` does not say."""


def stdout() -> Console:
    """A console on the current ``sys.stdout`` (created per call: tests swap the stream)."""
    from rich.console import Console

    console = Console(highlight=False)
    if not console.is_terminal and "COLUMNS" not in os.environ:
        # Rich assumes 80 columns off a terminal; tables of events read better wider.
        console = Console(highlight=False, width=PIPE_WIDTH)
    return console


class ProgressBar:
    """A rich progress bar on stderr, fed ``(done, total)`` callbacks.

    It appears on the first callback with work to do, so opening a ledger that has
    nothing to catch up prints nothing.
    """

    def __init__(self, description: str) -> None:
        self.description = description
        self._progress: Progress | None = None
        self._task: TaskID | None = None

    def __call__(self, done: int, total: int) -> None:
        if self._progress is None:
            if total == 0:
                return  # nothing to do: no bar at all
            self._start(total)
        assert self._progress is not None and self._task is not None
        self._progress.update(self._task, completed=done, total=total)

    def _start(self, total: int) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        self._progress = Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
            TextColumn("events"), TimeElapsedColumn(), console=Console(stderr=True))
        self._progress.start()
        self._task = self._progress.add_task(self.description, total=total)

    def close(self, *, keep: bool = True) -> None:
        """Stop drawing, leaving the final bar on screen unless ``keep`` is false."""
        if self._progress is not None:
            if not keep:
                self._progress.live.transient = True  # erase the bar on a terminal
                self._progress.console.quiet = True  # and print nothing elsewhere
            self._progress.stop()
            self._progress = None


@contextmanager
def progress_bar(description: str) -> Iterator[ProgressBar]:
    """A ``ProgressBar`` closed on leaving; erased when the block fails."""
    bar = ProgressBar(description)
    try:
        yield bar
    except BaseException:
        # A failure is reported on one line; a half-filled bar above it would only confuse.
        bar.close(keep=False)
        raise
    finally:
        bar.close()
