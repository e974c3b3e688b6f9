"""Write the HTTP service's OpenAPI document to ``clients/openapi.json`` (``make openapi``).

``tests/test_service_openapi.py`` fails when the committed file differs from what the
service generates; run this script after changing a route or a model.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET = ROOT / "clients" / "openapi.json"


def openapi_text() -> str:
    """The document as committed: indented JSON in FastAPI's key order, one final newline."""
    from ctxledger._service.app import create_app

    # No request is served: the URL is never opened.
    return json.dumps(create_app("sqlite://").openapi(), indent=2, ensure_ascii=False) + "\n"


def main() -> int:
    """Write the document; print where."""
    TARGET.parent.mkdir(exist_ok=True)
    TARGET.write_text(openapi_text(), encoding="utf-8")
    print(f"wrote {TARGET.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
