"""Reading character card files (``.json``, or a ``.png`` carrying the card in a text
chunk) and lorebook files, into the JSON objects ``card.set`` and ``lorebook.set`` take.

Every failure is a ``CardFileError`` whose message is one line naming the file and the
problem. Nothing here touches the database: the caller appends what was read.

PNG chunks are walked here rather than with Pillow: Pillow reaches text chunks written
after the image data (where SillyTavern puts the card) only by decoding the whole image,
and it is a large dependency for reading one text chunk.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import struct
import zlib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Final

from ctxledger.io._bounded import (
    BoundedInputError,
    InputLimits,
    loads_bounded,
    read_bounded,
    size_text,
    too_large,
)
from ctxledger.store.character_card import LOREBOOK_SPEC, CardFileError, whole_card_data

PNG_SIGNATURE: Final = b"\x89PNG\r\n\x1a\n"
CARD_KEYWORDS: Final = ("ccv3", "chara")
"""The text chunk keywords of a card, preferred first: the V3 spec says a reader that
finds both uses ``ccv3``. Matched without case, as SillyTavern does."""
TEXT_CHUNKS: Final = (b"tEXt", b"zTXt", b"iTXt")
MAX_TEXT_BYTES: Final = 16 * 1024 * 1024
"""A compressed card chunk is refused past this size once inflated (a card is far
smaller; a zip bomb is not)."""
MAX_INFLATED_BYTES: Final = 24 * 1024 * 1024
"""What all of a PNG's card chunks may inflate to together."""
MAX_PNG_CHUNKS: Final = 100_000
"""Chunks walked before a PNG is refused: a 64 MiB image in 8 KiB data chunks has about
8,000; a file of millions of empty chunks is an attack."""

Source = str | os.PathLike[str] | bytes
"""A file's path, or its bytes."""


def read_card(source: Source, *, name: str | None = None) -> dict[str, Any]:
    """The card JSON object of a card file: JSON, or a PNG with a ``ccv3``/``chara`` text
    chunk (the PNG signature decides, not the extension). ``name`` is what errors call
    the input (default: the file's name, or ``input`` for bytes)."""
    raw, label = _load(source, name)
    if raw.startswith(PNG_SIGNATURE):
        return _object(_png_card(raw, label), label)
    if label.lower().endswith(".png") or raw[:1] == PNG_SIGNATURE[:1]:
        raise CardFileError(f"{label}: not a PNG (bad signature)")
    return _object(raw, label)


def card_set_data(card: Mapping[str, Any]) -> dict[str, Any]:
    """The ``card.set`` data that sets ``card`` (a card file's JSON) as the whole card
    (``store.character_card.whole_card_data``)."""
    from ctxledger.store.catalog import CardSet

    return whole_card_data(card, frozenset(CardSet.model_fields))


def read_lorebook(source: Source | Mapping[str, Any], *, name: str | None = None
                  ) -> dict[str, Any]:
    """A lorebook file's JSON object as ``lorebook.set`` takes it: a V2 ``character_book``
    or a ``lorebook_v3`` file as written, or a SillyTavern world-info export (entries
    keyed by uid) converted to a V2 book (``world_info_book``)."""
    if isinstance(source, Mapping):
        book = dict(source)
        label = name or "input"
    else:
        raw, label = _load(source, name)
        book = _object(raw, label)
    entries = book.get("entries")
    if book.get("spec") != LOREBOOK_SPEC and isinstance(entries, Mapping):
        return world_info_book(book, label)
    return book


def _load(source: Source, name: str | None) -> tuple[bytes, str]:
    if isinstance(source, bytes):
        label = name or "input"
        limits = InputLimits.from_env()
        if len(source) > limits.max_bytes:
            raise CardFileError(str(too_large(label, limits.max_bytes, "the input")))
        return source, label
    label = name or Path(source).name
    try:
        return read_bounded(source, label), label
    except BoundedInputError as exc:
        raise CardFileError(str(exc)) from None


def _object(raw: bytes, label: str) -> dict[str, Any]:
    """``raw`` as a JSON object (UTF-8, a byte-order mark allowed), within the input
    limits (``ctxledger.io._bounded``)."""
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise CardFileError(f"{label}: not UTF-8 (byte 0x{raw[exc.start]:02x} at offset "
                            f"{exc.start})") from None
    try:
        value = loads_bounded(text, label, parse_constant=_no_constant)
    except BoundedInputError as exc:
        raise CardFileError(str(exc)) from None
    except json.JSONDecodeError as exc:
        raise CardFileError(f"{label}: not JSON: {exc.msg} at line {exc.lineno} column "
                            f"{exc.colno}") from None
    except ValueError as exc:
        raise CardFileError(f"{label}: not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise CardFileError(f"{label}: not a JSON object (a {_kind(value)})")
    return value


def _no_constant(token: str) -> Any:
    # NaN and Infinity are not JSON, and no backend stores them.
    raise ValueError(f"{token} is not a JSON value")


def _kind(value: object) -> str:
    return {list: "list", str: "string", bool: "boolean", type(None): "null"}.get(
        type(value), "number")


# -- PNG ----------------------------------------------------------------------------------


def _chunks(raw: bytes, label: str) -> Iterator[tuple[bytes, bytes]]:
    """``(type, data)`` of each chunk up to ``IEND``, every CRC checked; more than
    ``MAX_PNG_CHUNKS`` chunks is an error."""
    offset = len(PNG_SIGNATURE)
    walked = 0
    while True:
        if offset + 8 > len(raw):
            raise CardFileError(f"{label}: truncated PNG: it ends at offset {len(raw)} "
                                "without an IEND chunk")
        walked += 1
        if walked > MAX_PNG_CHUNKS:
            raise CardFileError(f"{label}: the PNG has more than {MAX_PNG_CHUNKS} chunks"
                                " (the chunk limit)")
        length, kind = struct.unpack(">I4s", raw[offset:offset + 8])
        end = offset + 8 + length
        if end + 4 > len(raw):
            raise CardFileError(f"{label}: truncated PNG: chunk {_name(kind)} at offset "
                                f"{offset} runs past the end of the file")
        data = raw[offset + 8:end]
        (crc,) = struct.unpack(">I", raw[end:end + 4])
        if zlib.crc32(kind + data) != crc:
            raise CardFileError(f"{label}: corrupt PNG: chunk {_name(kind)} at offset "
                                f"{offset} fails its CRC")
        yield kind, data
        if kind == b"IEND":
            return
        offset = end + 4


def _name(kind: bytes) -> str:
    return repr(kind.decode("latin-1"))


class _Inflated:
    """What the text chunks of one PNG have inflated so far, against
    ``MAX_INFLATED_BYTES``."""

    def __init__(self) -> None:
        self.total = 0


def _png_card(raw: bytes, label: str) -> bytes:
    """The JSON bytes of the card chunk (the first of each keyword; ``ccv3`` wins).

    Only a card chunk is decoded (and inflated): any other text chunk is skipped by its
    keyword, so side chunks cost a CRC check each and nothing more."""
    found: dict[str, str] = {}
    inflated = _Inflated()
    for kind, data in _chunks(raw, label):
        if kind not in TEXT_CHUNKS:
            continue
        keyword, sep, _ = data.partition(b"\0")
        wanted = keyword.decode("latin-1").lower()
        if not sep or wanted not in CARD_KEYWORDS or wanted in found:
            continue
        found[wanted] = _text_chunk(kind, data, label, inflated)
    chosen = next((k for k in CARD_KEYWORDS if k in found), None)
    if chosen is None:
        raise CardFileError(f"{label}: no 'chara' or 'ccv3' text chunk: not a character "
                            "card")
    try:
        return base64.b64decode("".join(found[chosen].split()), validate=True)
    except (binascii.Error, ValueError):
        raise CardFileError(f"{label}: the {chosen!r} text chunk is not valid base64"
                            ) from None


def _text_chunk(kind: bytes, data: bytes, label: str, inflated: _Inflated) -> str:
    """A card text chunk's text (PNG spec: tEXt/zTXt Latin-1, iTXt UTF-8)."""
    _keyword, sep, rest = data.partition(b"\0")
    bad = CardFileError(f"{label}: corrupt PNG: a malformed {kind.decode()} chunk")
    if not sep:
        raise bad
    if kind == b"tEXt":
        return rest.decode("latin-1")
    if kind == b"zTXt":
        if rest[:1] != b"\0":
            raise bad
        return _inflate(rest[1:], label, inflated).decode("latin-1")
    if len(rest) < 2:
        raise bad
    compressed, method, rest = rest[0], rest[1], rest[2:]
    _language, sep1, rest = rest.partition(b"\0")
    _translated, sep2, text = rest.partition(b"\0")
    if not (sep1 and sep2) or compressed not in (0, 1) or (compressed and method != 0):
        raise bad
    body = _inflate(text, label, inflated) if compressed else text
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        raise CardFileError(f"{label}: corrupt PNG: an iTXt chunk's text is not UTF-8"
                            ) from None


def _inflate(data: bytes, label: str, inflated: _Inflated) -> bytes:
    room = min(MAX_TEXT_BYTES, MAX_INFLATED_BYTES - inflated.total)
    inflater = zlib.decompressobj()
    try:
        out = inflater.decompress(data, room)
    except zlib.error:
        raise CardFileError(f"{label}: corrupt PNG: a compressed text chunk does not "
                            "inflate") from None
    if inflater.unconsumed_tail:
        if room < MAX_TEXT_BYTES:
            raise CardFileError(f"{label}: the compressed text chunks inflate past "
                                f"{size_text(MAX_INFLATED_BYTES)} in all (the inflated"
                                " total limit)")
        raise CardFileError(f"{label}: a compressed text chunk inflates past "
                            f"{size_text(MAX_TEXT_BYTES)} (the per-chunk limit)")
    inflated.total += len(out)
    return out


# -- SillyTavern world info ---------------------------------------------------------------

_ST_POSITIONS: Final = {0: "before_char"}
"""SillyTavern's numeric positions: 0 is before the character; every other one (after
it, author's note, at depth...) reads as ``after_char``, its number kept in the entry's
``extensions.position``, as SillyTavern's own conversion does."""


def world_info_book(world: Mapping[str, Any], label: str = "input") -> dict[str, Any]:
    """A SillyTavern world-info export (``{"entries": {"<uid>": {...}}}``) as a V2 book.

    Each entry: ``uid``->``id``, ``key``->``keys``, ``keysecondary``->``secondary_keys``,
    ``order``->``insertion_order``, ``disable``->``enabled`` (negated), ``comment``,
    ``content``, ``constant`` and ``selective`` as they are, ``position`` 0->
    ``before_char`` and any other number->``after_char``, the number kept as
    ``extensions.position``; ``depth``, ``role`` and every other key go into the entry's
    ``extensions`` under their own names. The book's other keys go into its
    ``extensions``; entries are listed by uid key (numerically, then as text).
    """
    entries: Mapping[str, Any] = world["entries"]
    book: dict[str, Any] = {}
    if isinstance(world.get("name"), str):
        book["name"] = world["name"]
    others = {k: v for k, v in world.items() if k not in ("entries", "name")}
    if others:
        book["extensions"] = others
    book["entries"] = [_world_entry(entries[key], f"entries.{key}", label)
                       for key in sorted(entries, key=_uid_order)]
    return book


def _uid_order(key: str) -> tuple[int, int, str, str]:
    # Numeric order without converting: a uid of thousands of digits is still a key.
    if key.isascii() and key.isdigit():
        digits = key.lstrip("0")
        return (0, len(digits), digits, key)
    return (1, 0, "", key)


_RENAMED: Final = {"uid": "id", "key": "keys", "keysecondary": "secondary_keys",
                   "order": "insertion_order"}
_KEPT: Final = ("comment", "content", "constant", "selective")


def _world_entry(entry: Any, where: str, label: str) -> dict[str, Any]:
    if not isinstance(entry, Mapping):
        raise CardFileError(f"{label}: {where}: a world-info entry must be an object")
    out: dict[str, Any] = {}
    extensions: dict[str, Any] = {}
    if isinstance(entry.get("extensions"), Mapping):
        extensions.update(entry["extensions"])
    for key in sorted(entry):
        value = entry[key]
        if key in _RENAMED:
            out[_RENAMED[key]] = value
        elif key in _KEPT:
            out[key] = value
        elif key == "disable":
            if not isinstance(value, bool):
                raise CardFileError(f"{label}: {where}.disable: must be true or false")
            out["enabled"] = not value
        elif key == "position":
            if isinstance(value, bool) or not isinstance(value, int):
                raise CardFileError(f"{label}: {where}.position: must be a number")
            out["position"] = _ST_POSITIONS.get(value, "after_char")
            extensions["position"] = value
        elif key != "extensions":
            extensions[key] = value
    out["extensions"] = extensions
    return out
