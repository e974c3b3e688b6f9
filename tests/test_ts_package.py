"""The TypeScript client is a package of the service's own version, whose manifest points
at complete declarations (``make test-ts`` packs, installs and compiles it)."""

from __future__ import annotations

import json
from pathlib import Path

import ctxledger

PACKAGE = Path(__file__).resolve().parent.parent / "clients" / "typescript"


def test_the_client_s_version_is_the_service_s() -> None:
    manifest = json.loads((PACKAGE / "package.json").read_text(encoding="utf-8"))
    assert manifest["version"] == ctxledger.__version__


def test_the_manifest_ships_the_declarations_and_a_readme() -> None:
    manifest = json.loads((PACKAGE / "package.json").read_text(encoding="utf-8"))
    assert manifest["types"] == manifest["exports"]["."]["types"] == "./dist/src/index.d.ts"
    assert manifest["exports"]["."]["import"] == "./dist/src/index.js"
    assert set(manifest["files"]) == {"dist/src", "README.md"}
    assert "prepack" in manifest["scripts"]  # npm pack builds first
    # The schema is a module of its own, so tsc emits its declarations (a .d.ts source
    # is never copied to the output).
    assert (PACKAGE / "src" / "schema.ts").is_file()
    assert not (PACKAGE / "src" / "schema.d.ts").exists()
    assert "## Quick start" in (PACKAGE / "README.md").read_text(encoding="utf-8")
