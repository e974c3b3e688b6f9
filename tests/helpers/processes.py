"""``tests/helpers/writer.py`` in a child process, its stdout drained by a thread."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path
from typing import IO, Any

WRITER_SCRIPT = Path(__file__).parent / "writer.py"
HANG_GUARD_SECONDS = 300
"""Only a guard against a hung child; never an assertion about speed."""


class Child:
    """A writer process started with ``args`` (after the URL); records every JSON line."""

    def __init__(self, url: str, *args: str) -> None:
        self.records: list[dict[str, Any]] = []
        self.ready = threading.Event()
        self.proc = subprocess.Popen(
            [sys.executable, str(WRITER_SCRIPT), url, *args],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        self.reader = threading.Thread(target=self._drain, args=(self.proc.stdout,))
        self.reader.start()

    def _drain(self, stdout: IO[str]) -> None:
        for line in stdout:
            record = json.loads(line)
            self.records.append(record)
            if record.get("ready"):
                self.ready.set()
        self.ready.set()  # also release the waiter if the child died before "ready"

    def go(self) -> None:
        """Let a ``--wait-for-go`` child start writing."""
        assert self.ready.wait(HANG_GUARD_SECONDS)
        assert self.proc.stdin is not None
        self.proc.stdin.write("go\n")
        self.proc.stdin.close()

    def finish(self) -> list[dict[str, Any]]:
        """Wait for a successful exit; returns every record the child printed."""
        assert self.proc.stderr is not None
        code = self.proc.wait(timeout=HANG_GUARD_SECONDS)
        self.reader.join()
        stderr = self.proc.stderr.read()
        self.proc.stderr.close()
        assert code == 0, f"writer failed: {stderr}"
        return self.records

    def kill(self) -> None:
        """Kill a child still running (cleanup after a failed test)."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.reader.join()
