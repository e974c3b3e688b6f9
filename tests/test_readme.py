"""README.md shows real output: every marked block is produced again and compared."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_readme_outputs_are_current() -> None:
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "readme.py"), "--check"],
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "outputs are current" in done.stdout
