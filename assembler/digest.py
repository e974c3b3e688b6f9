"""The digest of an assembly: SHA-256 over its canonical JSON.

Canonical JSON (sorted keys, no spaces, UTF-8) of the assembly without the digest itself
and without ``tokens.methods`` (where the vocabulary was loaded from does not change a
count). Floats were rounded before they entered the model, and datetimes serialize in one
fixed UTC form, so the same input gives the same digest in any process.

With a ``memo.CanonicalMemo`` (a speed-up, never a second definition), the canonical JSON
of the (immutable) decisions, messages and report rows of recent assemblies is reused, so sealing an
assembly that reuses most of them serializes only the new ones. ``canonical_payload(a, memo)`` is
byte for byte ``canonical_payload(a)`` (tests check it); the text is still built, and
hashed, whole.
"""

from __future__ import annotations

import hashlib
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

import orjson
from pydantic import BaseModel

from ctxledger.assembler.memo import CanonicalMemo
from ctxledger.assembler.model import Assembly, ContextMessage
from ctxledger.store.canonical import (
    PLAIN_JSON_ONLY,
    canonical_json,
    refuse_non_json,
    sha256_hex,
)

_EXCLUDED: Any = {"digest": True, "tokens": {"methods": True}}
_WITHOUT_MESSAGES: Any = {"digest": True, "messages": True, "tokens": {"methods": True}}
_SPLIT: Any = {"digest": True, "decisions": True, "messages": True, "report": True,
               "sections": True, "tokens": {"methods": True}}

def canonical_payload(assembly: Assembly, memo: CanonicalMemo | None = None) -> str:
    """The canonical JSON text the digest is computed over.

    With ``memo``, lists of models (the decisions, the sections' items, a report's rows)
    are joined from their memoized JSON and the object is put together key by key, in
    sorted order: the same text as without it.
    """
    if memo is None:
        parts = {key: canonical_json(value) for key, value in
                 assembly.model_dump(mode="json", exclude=_WITHOUT_MESSAGES).items()}
        parts["messages"] = messages_json(assembly.messages)
        return json_object(parts)
    parts = {key: canonical_json(value) for key, value in
             assembly.model_dump(mode="json", exclude=_SPLIT).items()}
    parts["decisions"] = memo.json_list("decisions", assembly.decisions)
    parts["messages"] = memo.json_list("messages", assembly.messages)
    # Each section's items come from the memo too: a long history's are the same objects
    # every assembly.
    parts["sections"] = "[" + ",".join([_model_json(section, memo, ("section", section.name))
                                        for section in assembly.sections]) + "]"
    parts["report"] = _model_json(assembly.report, memo, "report")
    return json_object(parts)


def messages_json(messages: Sequence[ContextMessage]) -> str:
    """``canonical_json`` of the messages' dump, straight from orjson.

    A message holds strings, integers, booleans and nulls only (no float: nothing of
    its model is one), and for those orjson writes the reference form's bytes, so the scan
    ``canonical_json`` makes for floats written differently is not needed; it would
    otherwise send the whole context's text to the slow reference encoder for every
    ``null`` a message holds."""
    dumped = [message.model_dump(mode="json") for message in messages]
    try:
        return orjson.dumps(dumped, default=refuse_non_json,
                            option=orjson.OPT_SORT_KEYS | PLAIN_JSON_ONLY).decode()
    except TypeError:  # a lone surrogate in a text: the reference form decides
        return canonical_json(dumped)


def compute_digest(assembly: Assembly, memo: CanonicalMemo | None = None) -> str:
    """Hex SHA-256 of ``canonical_payload``."""
    return sha256_hex(canonical_payload(assembly, memo))


def seal(assembly: Assembly, memo: CanonicalMemo | None = None) -> Assembly:
    """``assembly`` with its ``digest`` set."""
    return assembly.model_copy(update={"digest": compute_digest(assembly, memo)})


def canonical_text(text: str | list[str]) -> str:
    """``canonical_json(text)`` for a string or a list of strings, without the scan for
    number forms.

    ``canonical_json`` looks through orjson's output for the forms in which orjson and
    the reference encoder can differ (small floats; ``null``, orjson's NaN), which a
    string never produces: in a string those bytes are only text, escaped alike by both.
    The scan costs about as much as the rest of a warm assembly for a long context.
    What orjson refuses (a lone surrogate, a subclass of str) still goes to the
    reference encoder.
    """
    try:
        return orjson.dumps(text, default=refuse_non_json, option=PLAIN_JSON_ONLY).decode()
    except TypeError:
        return canonical_json(text)


Fragment = str | list[Any]
"""Canonical JSON given in pieces: a string, or a list of fragments one after another
(so that a large payload is hashed without being joined into one string first)."""


def object_fragment(parts: Mapping[str, Fragment]) -> list[Fragment]:
    """``json_object`` of fragments, as a fragment."""
    out: list[Fragment] = ["{"]
    for index, key in enumerate(sorted(parts)):
        out.append(("," if index else "") + canonical_json(key) + ":")
        out.append(parts[key])
    out.append("}")
    return out


def array_fragment(items: Sequence[Fragment]) -> list[Fragment]:
    """A JSON array of members given as canonical JSON fragments (a string may itself be
    several members joined by commas; empty ones are skipped), as a fragment."""
    out: list[Fragment] = ["["]
    for index, item in enumerate(item for item in items if item):
        if index:
            out.append(",")
        out.append(item)
    out.append("]")
    return out


def message_fragment(message: ContextMessage) -> list[Fragment]:
    """The canonical JSON of one message, as a fragment: a string content (a whole
    context, for a profile that sends one message) goes through ``canonical_text``."""
    dumped = message.model_dump(mode="json")
    return object_fragment({
        key: canonical_text(value) if type(value) is str else canonical_json(value)
        for key, value in dumped.items()})


def seal_known(assembly: Assembly, known: Mapping[str, Fragment]) -> Assembly:
    """``seal`` given the canonical JSON of some top-level fields (``known``, e.g. joined
    from each part's kept JSON, possibly in pieces): the same digest as
    ``seal(assembly)``, which the tests check; the other fields are serialized here.
    The pieces are hashed in order, never joined: the UTF-8 of a concatenation is the
    concatenation of the UTF-8s."""
    exclude: Any = {"digest": True, "tokens": {"methods": True},
                    **{name: True for name in known}}
    parts: dict[str, Fragment] = {
        key: canonical_text(value) if type(value) is str else canonical_json(value)
        for key, value in assembly.model_dump(mode="json", exclude=exclude).items()}
    parts.update(known)
    hasher = hashlib.sha256()
    _feed(hasher, object_fragment(parts))
    return assembly.model_copy(update={"digest": hasher.hexdigest()})


def _feed(hasher: Any, fragment: Fragment) -> None:
    if isinstance(fragment, str):
        hasher.update(fragment.encode("utf-8"))
    else:
        for part in fragment:
            _feed(hasher, part)


def _model_json(model: BaseModel, memo: CanonicalMemo, name: Hashable) -> str:
    # A report's lists of models (rows, tiers) come from the memo; the rest is dumped.
    lists = {field for field in type(model).model_fields
             if _is_model_list(getattr(model, field))}
    parts = {key: canonical_json(value) for key, value in
             model.model_dump(mode="json", exclude=lists).items()}
    for field in lists:
        parts[field] = memo.json_list((name, field), getattr(model, field))
    return json_object(parts)


def _is_model_list(value: Any) -> bool:
    # A model's list field holds one type (validated, or built from the same): its first
    # item says what all are.
    return type(value) is list and bool(value) and isinstance(value[0], BaseModel)


def json_object(parts: Mapping[str, str]) -> str:
    """A JSON object from its members' canonical JSON: keys sorted, no spaces."""
    # json.dumps(sort_keys=True) orders keys as sorted() does.
    return "{" + ",".join([canonical_json(key) + ":" + parts[key]
                           for key in sorted(parts)]) + "}"
