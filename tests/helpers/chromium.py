"""Debian's Chromium driven by Playwright, for the browser view's tests (``make browser``
installs it; ``playwright install`` cannot download here)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = os.environ.get("CTXLEDGER_CHROMIUM", "/usr/bin/chromium")


def launched_chromium() -> Iterator[Any]:
    """Chromium, headless, for a module-scoped fixture to yield from; skips without it."""
    playwright_api = pytest.importorskip("playwright.sync_api")
    if not Path(CHROMIUM).exists():
        pytest.skip(f"no Chromium at {CHROMIUM}: run 'make browser'")
    with playwright_api.sync_playwright() as driver:
        launched = driver.chromium.launch(executable_path=CHROMIUM, headless=True,
                                          args=["--no-sandbox"])
        yield launched
        launched.close()
