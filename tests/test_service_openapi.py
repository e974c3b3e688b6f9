"""The committed OpenAPI document (``clients/openapi.json``) is the one the service
generates, and it documents every error as problem+json."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("openapi_script",
                                                  ROOT / "scripts" / "openapi.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_committed_openapi_is_current() -> None:
    committed = (ROOT / "clients" / "openapi.json").read_text(encoding="utf-8")
    assert _script().openapi_text() == committed, \
        "clients/openapi.json is stale: run 'make openapi'"


def test_openapi_is_3_1_with_bearer_keys_and_problem_errors() -> None:
    document = json.loads(_script().openapi_text())
    assert document["openapi"].startswith("3.1")
    assert document["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            errors = operation["responses"]["4XX"]["content"]
            assert list(errors) == ["application/problem+json"], (path, method)
            if path != "/healthz":
                assert operation["security"] == [{"HTTPBearer": []}], (path, method)
