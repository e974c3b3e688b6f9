"""The ``ctxledger`` command line (``ctxledger.cli:main``); ``app`` is its Typer app.

``app`` is imported on first use (PEP 562): ``main`` runs ``ctxledger hook`` without
importing Typer at all (``ctxledger._hook._script``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ctxledger.cli._app import app

__all__ = ["app", "main"]


def main() -> None:
    """Console-script entry point (``ctxledger``): the hook through its fast route
    (``ctxledger._hook._script``), every other command through the Typer app."""
    from ctxledger._hook._script import main as script_main

    script_main()


def __getattr__(name: str) -> Any:
    if name == "app":
        from ctxledger.cli._app import app

        return app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
