"""The one bounded reader of what the command line and the hook take: a file, ``-`` for
stdin, or a socket's bytes, read up to a size limit and decoded as JSON up to a nesting
limit, with integers range-checked before they are converted.

A file past the size limit is refused before anything past the limit is read (a regular
file by its size, a stream, ``/dev/zero`` or a FIFO after ``limit + 1`` bytes), so memory
never grows past the limit. Every failure is a ``BoundedInputError``, one line naming the
input and the limit's environment variable. Standard library only: the hook's tool-use
path imports this.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from collections.abc import Callable, Mapping
from typing import IO, Any, Final, NamedTuple

from ctxledger.store.errors import LedgerError

MAX_BYTES_ENV: Final = "CTXLEDGER_MAX_INPUT_BYTES"
"""The largest input file (or stdin, or hook event) read, in bytes."""
MAX_DEPTH_ENV: Final = "CTXLEDGER_MAX_INPUT_DEPTH"
"""The deepest JSON nesting read (the top-level object or list is level 1)."""
DEFAULT_MAX_BYTES: Final = 64 * 1024 * 1024
DEFAULT_MAX_DEPTH: Final = 100
"""Above the store's own nesting limit (64 levels in an event), so a value between the
two gets the store's message, which names the field."""
MAX_INT_DIGITS: Final = 19
"""Every integer ctxledger stores fits signed 64 bits, 19 digits: a longer one is
refused before ``int`` converts it (converting thousands of digits is slow, and Python
refuses past 4300)."""
_CHUNK: Final = 1024 * 1024
STDIN: Final = "-"


class BoundedInputError(LedgerError):
    """An input passes a limit (size, nesting, a number's range) or cannot be read."""


class InputLimits(NamedTuple):
    """The size and nesting limits of an input (a named tuple, not a dataclass: the
    hook's tool use imports this module, and ``dataclasses`` imports ``inspect``)."""

    max_bytes: int = DEFAULT_MAX_BYTES
    max_depth: int = DEFAULT_MAX_DEPTH

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> InputLimits:
        """The limits ``$CTXLEDGER_MAX_INPUT_BYTES`` and ``$CTXLEDGER_MAX_INPUT_DEPTH``
        set (their defaults when unset); a value that is not a positive integer is a
        one-line error."""
        env = os.environ if environ is None else environ
        return cls(_positive(env, MAX_BYTES_ENV, DEFAULT_MAX_BYTES),
                   _positive(env, MAX_DEPTH_ENV, DEFAULT_MAX_DEPTH))


def _positive(env: Mapping[str, str], name: str, default: int) -> int:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    if not (raw.isascii() and raw.isdigit()) or len(raw) > 18 or int(raw) == 0:
        raise BoundedInputError(f"${name} must be a positive whole number, not {raw!r}")
    return int(raw)


def size_text(size: int) -> str:
    """``size`` bytes as people read a limit: ``64 MiB``, ``512 KiB``, ``1000 bytes``."""
    for unit, factor in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= factor and size % factor == 0:
            return f"{size // factor} {unit}"
    return f"{size} bytes"


def too_large(label: str, limit: int, what: str = "the file") -> BoundedInputError:
    """The error of an input past ``limit`` bytes."""
    return BoundedInputError(f"{label}: {what} is larger than {size_text(limit)}"
                             f" ({MAX_BYTES_ENV})")


def read_bounded(source: str | os.PathLike[str] | IO[bytes], label: str | None = None,
                 limits: InputLimits | None = None) -> bytes:
    """The bytes of ``source`` (a path, ``-`` for stdin, or an open binary stream), at
    most ``limits.max_bytes``; ``label`` names it in errors (default: the path as given,
    ``stdin``). A missing or unreadable file is a one-line error too."""
    limit = (limits or InputLimits.from_env()).max_bytes
    if not isinstance(source, str | os.PathLike):
        return _read_stream(source, label or "input", limit, "the input")
    if os.fspath(source) == STDIN:
        return _read_stream(sys.stdin.buffer, label or "stdin", limit, "the input")
    name = label or os.fspath(source)
    try:
        with open(source, "rb") as stream:
            info = os.fstat(stream.fileno())
            if stat.S_ISREG(info.st_mode) and info.st_size > limit:
                raise too_large(name, limit)
            return _read_stream(stream, name, limit, "the file")
    except FileNotFoundError:
        raise BoundedInputError(f"{name}: no such file") from None
    except OSError as exc:
        raise BoundedInputError(f"{name}: cannot read: {exc.strerror or exc}") from None


def _read_stream(stream: IO[bytes], label: str, limit: int, what: str) -> bytes:
    data = bytearray()
    while True:
        chunk = stream.read(min(_CHUNK, limit + 1 - len(data)))
        if not chunk:
            return bytes(data)
        data += chunk
        if len(data) > limit:
            raise too_large(label, limit, what)


def too_deep(label: str, limit: int) -> BoundedInputError:
    """The error of JSON nested past ``limit`` levels."""
    return BoundedInputError(f"{label}: JSON nested deeper than {limit} levels"
                             f" ({MAX_DEPTH_ENV})")


def loads_bounded(text: str | bytes, label: str, limits: InputLimits | None = None, *,
                  check_numbers: bool = True,
                  parse_constant: Callable[[str], Any] | None = None) -> Any:
    """``json.loads(text)`` within ``limits.max_depth`` levels and, with
    ``check_numbers``, with every integer at most ``MAX_INT_DIGITS`` digits (checked
    before conversion). A limit passed is a ``BoundedInputError``; a syntax error is
    ``json.JSONDecodeError`` (a ``ValueError``), left for the caller to word."""
    depth = (limits or InputLimits.from_env()).max_depth
    options: dict[str, Any] = {}
    if check_numbers:
        options["parse_int"] = lambda digits: _integer(digits, label)
    if parse_constant is not None:
        options["parse_constant"] = parse_constant
    try:
        value = json.loads(text, **options)
    except RecursionError:
        raise too_deep(label, depth) from None
    except ValueError as exc:
        if not isinstance(exc, json.JSONDecodeError) and "digits" in str(exc):
            # Python's own refusal of an integer past 4300 digits (numbers unchecked).
            raise BoundedInputError(f"{label}: a number is out of range (over 4300"
                                    " digits)") from None
        raise
    if _deeper_than(value, depth, text):
        raise too_deep(label, depth)
    return value


def _integer(digits: str, label: str) -> int:
    size = len(digits.lstrip("-"))
    if size > MAX_INT_DIGITS:
        shown = digits if len(digits) <= 24 else digits[:20] + "..."
        raise BoundedInputError(f"{label}: the number {shown} ({size} digits) is out of"
                                f" range: integers have at most {MAX_INT_DIGITS} digits"
                                " (signed 64 bits)")
    return int(digits)


def _deeper_than(value: Any, limit: int, text: str | bytes) -> bool:
    """``value`` nests past ``limit`` levels; decided without a walk when the text has
    too few brackets to get there (counted in C)."""
    if isinstance(text, str):
        opened = text.count("[") + text.count("{")
    else:
        opened = text.count(b"[") + text.count(b"{")
    if opened <= limit or not isinstance(value, dict | list):
        return False
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, level = stack.pop()
        children = item.values() if isinstance(item, dict) else item
        if level > limit:
            return True
        stack.extend((child, level + 1) for child in children
                     if isinstance(child, dict | list))
    return False
