"""Where a media part's bytes come from when a chat API needs them inline.

The stored form holds media by reference (``store.chat``): a URL, a provider's file id,
or a media type plus the SHA-256 of the bytes. A ``data:`` URL carries its bytes; an
``https:`` URL or a file id is passed on as a reference where the API takes one. A part
held only by media type and SHA-256 names bytes the ledger never stored: the app that
keeps them passes a ``MediaResolver``, and without one the conversion fails with a
one-line ``ChatFormatError`` naming the part (never a silent placeholder: the model
would answer about an image it was never shown).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass

from ctxledger.assembler.errors import ChatFormatError
from ctxledger.store.chat import FilePart, ImagePart

MediaResolver = Callable[[str, str], bytes]
"""``resolve(media_type, sha256) -> bytes``: the bytes of a part held by its hash; the
converter checks that they hash to ``sha256``."""

# data:[<media type>][;param=value]*;base64,<data> (RFC 2397); only base64 carries bytes
# that an API takes as they are.
_DATA_URL = re.compile(r"data:(?P<type>[^;,]*)(?P<params>(?:;[^;,]*)*?);base64,(?P<data>.*)",
                       re.DOTALL | re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class Inline:
    """Media bytes as base64 text, with their media type."""

    media_type: str
    data: str
    """The bytes, base64-encoded (standard alphabet, padded)."""

    def data_url(self) -> str:
        """The ``data:`` URL of these bytes."""
        return f"data:{self.media_type};base64,{self.data}"

    def text(self, where: str) -> str:
        """The bytes as UTF-8 text (a ``text/plain`` document)."""
        try:
            return base64.b64decode(self.data, validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            raise ChatFormatError(f"{where}: the {self.media_type} data is not base64 of "
                                  "UTF-8 text") from None


def is_data_url(url: str | None) -> bool:
    """``url`` is a ``data:`` URL (its bytes are inline)."""
    return url is not None and url[:5].lower() == "data:"


def parse_data_url(url: str, where: str) -> Inline:
    """The media type and base64 data of a ``data:`` URL; anything but base64 (or a URL
    with no media type) is a one-line error."""
    found = _DATA_URL.fullmatch(url)
    if found is None:
        raise ChatFormatError(f"{where}: a data: URL must be base64 "
                              "(data:<media type>;base64,<data>)")
    media_type = found["type"].strip().lower()
    if not media_type:
        raise ChatFormatError(f"{where}: the data: URL names no media type")
    return Inline(media_type, found["data"])


def resolve(part: ImagePart | FilePart, resolver: MediaResolver | None, where: str,
            api: str) -> Inline:
    """The bytes of a part held by media type and SHA-256, from ``resolver``."""
    if part.media_type is None or part.sha256 is None:
        raise ChatFormatError(f"{where}: {api} cannot take this {part.type} part as it is "
                              f"held ({describe(part)})")
    if resolver is None:
        raise ChatFormatError(
            f"{where}: the {part.type} {part.media_type} sha256:{part.sha256[:12]} is held "
            f"by its hash only; pass resolve_media=(media_type, sha256) -> bytes to send "
            f"it to {api}")
    data = resolver(part.media_type, part.sha256)
    if hashlib.sha256(data).hexdigest() != part.sha256:
        raise ChatFormatError(f"{where}: the bytes resolve_media gave for sha256:"
                              f"{part.sha256[:12]} do not have that hash")
    return Inline(part.media_type, base64.b64encode(data).decode("ascii"))


def describe(part: ImagePart | FilePart) -> str:
    """How a part is held, for an error message."""
    if part.url is not None:
        return "a data: URL" if is_data_url(part.url) else f"the URL {part.url[:60]}"
    if isinstance(part, FilePart) and part.file_id is not None:
        return f"the file id {part.file_id}"
    return f"{part.media_type} sha256:{(part.sha256 or '')[:12]}"
