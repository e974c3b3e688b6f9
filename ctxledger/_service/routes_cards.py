"""Character cards and scope lorebooks: the HTTP side of ``card import`` and ``lorebook
import|remove``.

A card is uploaded as its file's bytes (JSON, or a PNG carrying it: the signature
decides, as for the CLI) and read by the same core (``io._card_files.read_card``); a
lorebook is the JSON of its file (a V2 ``character_book``, a ``lorebook_v3`` file or a
SillyTavern world-info export, read by ``read_lorebook``). The body limit
(``--max-body-bytes``) bounds both; a bad file is a 400 naming the problem in one line and
writes nothing. Each entry that cannot work as written is named in ``warnings``.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Request
from fastapi.concurrency import run_in_threadpool

from ctxledger._ledger import Ledger
from ctxledger._service.auth import (
    KeyDep,
    LedgerDep,
    checked_write,
    require_scope,
    require_writer,
    session_scope,
)
from ctxledger._service.keys import ApiKey
from ctxledger._service.models import CardOut, LorebookOut
from ctxledger._service.problems import Problem
from ctxledger.io._card_files import card_set_data, read_card, read_lorebook
from ctxledger.store.character_card import book_entries
from ctxledger.store.errors import InvalidArgument
from ctxledger.store.records import AppendResult
from ctxledger.store.streams import SCOPE_PREFIX

router = APIRouter(tags=["cards"])

_LABEL = "body"  # what a file's one-line problem calls the upload
_CARD_BODY: dict[str, Any] = {"requestBody": {
    "required": True,
    "description": "A card file as written: JSON (V1, V2 chara_card_v2, V3 chara_card_v3),"
                   " or a PNG with a 'chara' or 'ccv3' text chunk.",
    "content": {"application/json": {"schema": {"type": "object"}},
                "image/png": {"schema": {"type": "string", "format": "binary"}}}}}
_BOOK_BODY: dict[str, Any] = {"requestBody": {
    "required": True,
    "description": "A lorebook file's JSON: a V2 character_book, a lorebook_v3 file, or a"
                   " SillyTavern world-info export (converted to a V2 book).",
    "content": {"application/json": {"schema": {"type": "object"}}}}}
BookId = Annotated[str, Path(min_length=1, max_length=200, description="The book's id.")]


def _card_out(card: dict[str, Any], stream: str, result: AppendResult) -> CardOut:
    """What ``card import`` prints, and the lorebook warnings."""
    data = card.get("data") if "spec" in card else card
    fields = data if isinstance(data, dict) else {}
    name = fields.get("name")
    return CardOut(name=name if isinstance(name, str) else None,
                   spec=str(card.get("spec", "V1")),
                   lorebook_entries=len(book_entries(fields.get("character_book"))),
                   stream=stream, position=result.positions[-1],
                   warnings=list(result.warnings))


def _session_card(ledger: Ledger, key: ApiKey, session: str, raw: bytes) -> CardOut:
    card = read_card(raw, name=_LABEL)
    event = {"type": "card.set", "data": card_set_data(card)}
    # A session that does not exist yet is created by its card, in scope default.
    result = checked_write(ledger, key, session, [event], None,
                           lambda _: ledger.import_card(card, session=session))
    return _card_out(card, session, result)


def _scope_card(ledger: Ledger, scope: str, raw: bytes) -> CardOut:
    card = read_card(raw, name=_LABEL)
    return _card_out(card, SCOPE_PREFIX + scope, ledger.import_card(card, scope=scope))


@router.get("/sessions/{session}/card")
def session_card_file(session: str, ledger: LedgerDep, key: KeyDep) -> dict[str, Any]:
    """The session's card as a card file's JSON (the scope's card with the session's own
    fields over it), as ``ctxledger card export --session``; no card is a 400."""
    session_scope(ledger, key, session)
    return ledger.export_card(session=session)


@router.get("/scopes/{scope}/card")
def scope_card_file(scope: str, ledger: LedgerDep, key: KeyDep) -> dict[str, Any]:
    """The scope's own card as a card file's JSON, as ``ctxledger card export --scope``."""
    require_scope(key, scope)
    return ledger.export_card(scope=scope)


@router.post("/sessions/{session}/card", response_model=CardOut, openapi_extra=_CARD_BODY)
async def session_card(session: str, request: Request, ledger: LedgerDep,
                       key: KeyDep) -> CardOut:
    """Set the session's card from a card file (one ``card.set``, the whole card, as
    ``ctxledger card import --session``); a new session is started by it."""
    require_writer(key)
    raw = await request.body()
    return await run_in_threadpool(_session_card, ledger, key, session, raw)


@router.post("/scopes/{scope}/card", response_model=CardOut, openapi_extra=_CARD_BODY)
async def scope_card(scope: str, request: Request, ledger: LedgerDep,
                     key: KeyDep) -> CardOut:
    """Set the scope's card (its sessions' card where they have none of their own) from
    a card file, as ``ctxledger card import --scope``."""
    require_scope(key, scope)
    require_writer(key)
    raw = await request.body()
    return await run_in_threadpool(_scope_card, ledger, scope, raw)


def _set_book(ledger: Ledger, scope: str, book_id: str, raw: bytes) -> LorebookOut:
    book = read_lorebook(raw, name=_LABEL)
    result = ledger.set_lorebook(scope, book_id, book)
    return LorebookOut(book_id=book_id, entries=len(book_entries(book)),
                       stream=SCOPE_PREFIX + scope, position=result.positions[-1],
                       warnings=list(result.warnings))


@router.put("/scopes/{scope}/lorebooks/{book_id}", response_model=LorebookOut,
            openapi_extra=_BOOK_BODY)
async def set_lorebook(scope: str, book_id: BookId, request: Request, ledger: LedgerDep,
                       key: KeyDep) -> LorebookOut:
    """Create or replace the scope's lorebook ``book_id`` (one ``lorebook.set``), as
    ``ctxledger lorebook import --scope S --id ID``."""
    require_scope(key, scope)
    require_writer(key)
    raw = await request.body()
    return await run_in_threadpool(_set_book, ledger, scope, book_id, raw)


@router.delete("/scopes/{scope}/lorebooks/{book_id}", response_model=LorebookOut)
def remove_lorebook(scope: str, book_id: BookId, ledger: LedgerDep,
                    key: KeyDep) -> LorebookOut:
    """Remove the scope's lorebook ``book_id`` (one ``lorebook.removed``), as ``ctxledger
    lorebook remove``; a book the scope does not have is a 404, writing nothing."""
    require_scope(key, scope)
    require_writer(key)
    try:
        result = ledger.remove_lorebook(scope, book_id)
    except InvalidArgument as exc:
        raise Problem(404, str(exc)) from None
    return LorebookOut(book_id=book_id, entries=0, stream=SCOPE_PREFIX + scope,
                       position=result.positions[-1])
