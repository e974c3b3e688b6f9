"""The ``ctxledger`` command line (``ctxledger.cli:main``); ``app`` is its Typer app."""

from ctxledger.cli._app import app, main

__all__ = ["app", "main"]
