"""The docs show real output: every marked block of README.md and docs/*.md is produced
again and compared, and docs/cli.md is the reference the command line gives today."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "readme.py"


def _script() -> ModuleType:
    """scripts/readme.py as a module (registered first: its dataclass needs it)."""
    if "readme_script" in sys.modules:
        return sys.modules["readme_script"]
    spec = importlib.util.spec_from_file_location("readme_script", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["readme_script"] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_readme_outputs_are_current() -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), "--check"],
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "outputs are current" in done.stdout


def test_cli_reference_is_current() -> None:
    script = _script()
    written = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    assert script.with_reference(written) == written, "docs/cli.md is stale: run 'make readme'"
    assert written.endswith(script.cli_reference())


def test_cli_reference_lists_every_command_and_option() -> None:
    import typer

    from ctxledger.cli import app

    root = typer.main.get_command(app)
    ctx = root.context_class(root, info_name="ctxledger")
    reference = _script().cli_reference()
    for name in root.list_commands(ctx):
        command = root.get_command(ctx, name)
        assert command is not None
        assert f"\n## ctxledger {name}\n" in reference
        for param in command.params:
            for declaration in param.opts:
                if declaration.startswith("-"):
                    assert f"`{declaration}" in reference or f", {declaration}" in reference, \
                        f"{name} {declaration} missing from docs/cli.md"


def test_every_page_with_markers_is_regenerated() -> None:
    script = _script()
    pages = script.pages()
    assert pages[0] == ROOT / "README.md"
    marked = [p for p in (ROOT / "docs").glob("*.md")
              if "<!-- readme: " in p.read_text(encoding="utf-8")]
    assert marked
    assert set(marked) <= set(pages)
