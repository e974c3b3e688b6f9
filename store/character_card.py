"""Character cards as files carry them: V1 (flat), V2 (``chara_card_v2``) and V3
(``chara_card_v3``), and their lorebooks (``character_book``, world info).

``card.set`` takes either a merge of card fields (what an app changes) or a whole card as
a card file holds it. ``card_event_data`` turns the second into the first: the ``data``
object's fields, the spec and its version, and whatever else the file carries kept aside
(``card_extra`` for the file's other top-level keys, ``data_extra`` for unknown keys in
``data``), with ``replace`` set so the card replaces the session's whole card. Nothing a
card carries is lost, so ``card_file`` gives the file back (equal JSON).

A lorebook is kept as written (a JSON object): ``Lorebook`` checks its types when it is
set, and the assembler reads it (``assembler.lorebook``). Unknown keys in a book or an
entry are kept, as SillyTavern and other editors write their own there.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from pydantic import BaseModel, ConfigDict, Field, JsonValue, ValidationError

from ctxledger.store.errors import LedgerError

CARD_SPECS: Final = ("chara_card_v2", "chara_card_v3")
"""The ``spec`` values of card files with a ``data`` object."""
V1_FIELDS: Final = ("name", "description", "personality", "scenario", "first_mes",
                    "mes_example")
"""The six fields every V1 card has (the V1 spec requires them)."""
LOREBOOK_SPEC: Final = "lorebook_v3"
"""The ``spec`` of a standalone V3 lorebook file (``{"spec": "lorebook_v3", "data": …}``)."""
REPLACE: Final = "replace"
"""The ``card.set`` field saying the card replaces the whole current card."""
FILE_KEYS: Final = ("spec", "spec_version", "card_extra", "data_extra")
"""``card.set`` fields that describe the file, never the character: no prompt reads them."""


class CardFileError(LedgerError, ValueError):
    """A card (or lorebook) file is not one: its message is one line naming the problem."""


class LorebookEntry(BaseModel):
    """One lorebook entry, with the V2/V3 fields' types. Unknown keys are kept."""

    model_config = ConfigDict(extra="allow", frozen=True)
    keys: list[str] = Field(default_factory=list)
    content: str
    extensions: dict[str, JsonValue] = Field(default_factory=dict)
    enabled: bool = True
    insertion_order: int | float = 100
    """SillyTavern's default order; the specs require the field but cards omit it."""
    case_sensitive: bool | None = None
    use_regex: bool | None = None
    constant: bool | None = None
    name: str | None = None
    priority: int | float | None = None
    id: int | str | None = None
    comment: str | None = None
    selective: bool | None = None
    secondary_keys: list[str] | None = None
    position: str | None = None
    """``before_char`` or ``after_char`` (anything else is read as ``after_char``)."""


class Lorebook(BaseModel):
    """A lorebook (V2 ``character_book``, V3 lorebook ``data``). Unknown keys are kept."""

    model_config = ConfigDict(extra="allow", frozen=True)
    name: str | None = None
    description: str | None = None
    scan_depth: int | None = Field(default=None, ge=0)
    token_budget: int | None = Field(default=None, ge=0)
    recursive_scanning: bool | None = None
    extensions: dict[str, JsonValue] = Field(default_factory=dict)
    entries: list[LorebookEntry]


def check_lorebook(value: Any) -> Any:
    """Check ``value``'s types as a lorebook (strictly: ``"3"`` is not 3) and return it
    unchanged, so it is stored as written."""
    if value is not None:
        try:
            Lorebook.model_validate(value, strict=True)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(part) for part in first["loc"]) or "book"
            more = f" (+{exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
            raise ValueError(f"{where}: {first['msg']}{more}") from None
    return value


def lorebook_data(raw: Mapping[str, Any]) -> Mapping[str, Any]:
    """The book of a lorebook file: a ``lorebook_v3`` file's ``data``, or the object
    itself (a V2 ``character_book``)."""
    if "spec" not in raw:
        return raw
    if raw["spec"] != LOREBOOK_SPEC:
        raise CardFileError(f"unknown lorebook spec {raw['spec']!r} (known: {LOREBOOK_SPEC})")
    data = raw.get("data")
    if not isinstance(data, Mapping):
        raise CardFileError(f"a {LOREBOOK_SPEC} file needs a 'data' object")
    return data


def book_entries(book: object) -> list[Any]:
    """The entries of a lorebook as written (a ``character_book``, or a ``lorebook_v3``
    file's ``data``); none when ``book`` is no book. For summaries, never raises."""
    if not isinstance(book, Mapping):
        return []
    data = book.get("data") if book.get("spec") is not None else book
    entries = data.get("entries") if isinstance(data, Mapping) else None
    return entries if isinstance(entries, list) else []


def card_event_data(raw: Mapping[str, Any], known: frozenset[str]) -> dict[str, Any]:
    """``card.set`` data from ``raw``: a merge of ``known`` fields as it is, or a card
    file (V1, V2, V3) as the fields of a whole card (``replace``).

    A mapping with a ``spec`` is a V2/V3 file (``spec: null`` in a merge clears it), unless
    it is a whole card as stored (``replace``), which validates again as it is; one with
    keys outside ``known`` is a V1 file when it has the six V1 fields, and an error
    otherwise (naming the unknown keys)."""
    # A stored whole card (``replace``) names its spec too: it is read back as it is.
    if raw.get("spec") is not None and raw.get(REPLACE) is not True:
        return _spec_card(raw, known)
    unknown = sorted(key for key in raw if key not in known)
    if not unknown:
        return dict(raw)
    missing = [name for name in V1_FIELDS if name not in raw]
    if missing:
        raise CardFileError(
            f"unknown field(s) {', '.join(map(repr, unknown))}: give a card's fields, or a "
            f"whole card file (with spec {' or '.join(CARD_SPECS)}, or a V1 card with "
            f"all of {', '.join(V1_FIELDS)})")
    fields = {key: value for key, value in raw.items() if key in known}
    fields["card_extra"] = {key: raw[key] for key in unknown}
    return _whole(fields, known)


def whole_card_data(raw: Mapping[str, Any], known: frozenset[str]) -> dict[str, Any]:
    """``card.set`` data for a card file imported as the whole card, whatever it holds: a
    V1 card with nothing but card fields would otherwise read as a merge of them."""
    if raw.get("spec") is not None or any(key not in known for key in raw):
        return dict(raw)  # a file by its shape: card_event_data makes it whole
    return _whole(dict(raw), known)


def _spec_card(raw: Mapping[str, Any], known: frozenset[str]) -> dict[str, Any]:
    spec = raw["spec"]
    if spec not in CARD_SPECS:
        raise CardFileError(f"unknown card spec {spec!r} (known: {', '.join(CARD_SPECS)}; "
                            "a V1 card has no spec)")
    data = raw.get("data")
    if not isinstance(data, Mapping):
        raise CardFileError(f"a {spec} card needs a 'data' object")
    fields = {key: value for key, value in data.items() if key in known and key not in
              (*FILE_KEYS, REPLACE)}
    data_extra = {key: data[key] for key in data if key not in fields}
    card_extra = {key: raw[key] for key in raw if key not in ("spec", "spec_version", "data")}
    fields["spec"] = spec
    if "spec_version" in raw:
        fields["spec_version"] = raw["spec_version"]
    if data_extra:
        fields["data_extra"] = data_extra
    if card_extra:
        fields["card_extra"] = card_extra
    return _whole(fields, known)


def _whole(fields: dict[str, Any], known: frozenset[str]) -> dict[str, Any]:
    """A whole card: every known field it lacks is cleared (null), and ``replace``."""
    whole: dict[str, Any] = {key: None for key in sorted(known) if key != REPLACE}
    whole.update(fields)
    whole[REPLACE] = True
    return whole


def card_file(card: Mapping[str, Any]) -> dict[str, Any]:
    """The card file of a session's ``card`` (its current fields, as stored): a V2/V3
    file when the card came as one (its ``spec``), else a V1 flat card. A card imported
    from a file comes back as the file was (equal JSON)."""
    fields = {key: value for key, value in card.items()
              if key not in (*FILE_KEYS, REPLACE)}
    fields.update(card.get("data_extra") or {})
    spec = card.get("spec")
    if spec is None:
        return {**fields, **(card.get("card_extra") or {})}
    out: dict[str, Any] = {"spec": spec}
    if "spec_version" in card:
        out["spec_version"] = card["spec_version"]
    out["data"] = fields
    out.update(card.get("card_extra") or {})
    return out
