"""How the CLI reports failures: one line on stderr starting ``error: ``, then exit 1.

Bad input and unusable databases (see ``ctxledger._open``) are expected failures and never
show a traceback. Anything else is a bug: it is reported on one line too, and
``CTXLEDGER_DEBUG=1`` re-raises it so the traceback can be read.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import ParamSpec, TypeVar

import typer

from ctxledger._open import explain, one_line
from ctxledger._warnings import one_line_warnings

P = ParamSpec("P")
R = TypeVar("R")

DEBUG_ENV_VAR = "CTXLEDGER_DEBUG"
EXIT_ERROR = 1
"""Exit code for a domain error (bad input, conflict, failed verification, bad database).
Usage errors exit 2, raised by the CLI framework itself."""


def fail(message: str) -> typer.Exit:
    """Print ``error: message`` on stderr and return the exit to raise."""
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(code=EXIT_ERROR)


def reports_errors(command: Callable[P, R]) -> Callable[P, R]:
    """Wrap a CLI command so every failure ends as one ``error:`` line and exit code 1."""

    @functools.wraps(command)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            with one_line_warnings(lambda line: typer.echo(line, err=True)):
                return command(*args, **kwargs)
        except BrokenPipeError:
            raise  # the reader went away (``| head``); the framework exits quietly
        except (typer.Exit, typer.Abort, typer.TyperException):
            # Exits and usage errors belong to the CLI framework (usage errors exit 2).
            raise
        except Exception as exc:
            message = explain(exc)
            if message is None:
                if os.environ.get(DEBUG_ENV_VAR) == "1":
                    raise
                message = (f"internal error: {type(exc).__name__}: {one_line(str(exc))}"
                           f" (set {DEBUG_ENV_VAR}=1 to see the traceback)")
            raise fail(message) from None

    return wrapper
