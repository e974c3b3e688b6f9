"""Character card and lorebook files: ``card import|export`` and ``lorebook
import|remove``.

A file is read and its event checked before the database is opened, so a bad file
writes nothing (and creates no database); its error names the file.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer

from ctxledger._open import open_existing, open_ledger
from ctxledger.cli._errors import fail
from ctxledger.cli._options import FormatOption, JsonOrText, db_of

SessionOption = Annotated[str | None, typer.Option(
    "--session", metavar="S", help="The session stream (exactly one of --session/--scope).")]
ScopeOption = Annotated[str | None, typer.Option(
    "--scope", metavar="S",
    help="The scope: its card is the card of its sessions that have none of their own"
         " (exactly one of --session/--scope).")]
CardFile = Annotated[str, typer.Argument(
    metavar="FILE",
    help="A card file: JSON (V1, V2 chara_card_v2, V3 chara_card_v3), or a PNG with a"
         " 'chara' or 'ccv3' text chunk.")]


def _stream(session: str | None, scope: str | None) -> str:
    """The stream of ``--session``/``--scope``; both or neither is an error."""
    from ctxledger.store.streams import SCOPE_PREFIX

    if (session is None) == (scope is None):
        raise fail("give exactly one of --session and --scope")
    for option, value in (("--session", session), ("--scope", scope)):
        if value is not None and not value.strip():
            raise fail(f"{option} must not be empty")
    return session if session is not None else SCOPE_PREFIX + str(scope)


@contextmanager
def _lorebook_warnings() -> Iterator[None]:
    """Print each ``LorebookWarning`` the import raises as a ``warning:`` line on stderr
    (the entry and why), after the import."""
    from ctxledger.assembler.lorebook import LorebookWarning

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", LorebookWarning)
        yield
    for found in caught:
        if issubclass(found.category, LorebookWarning):
            typer.echo(f"warning: {found.message}", err=True)


def _checked(stream: str, event: dict[str, Any], label: str) -> None:
    """Validate ``event`` as the store will, before any database is opened."""
    from ctxledger._setting_checks import check_event
    from ctxledger.store.errors import EventValidationError
    from ctxledger.store.strict import DEFAULT_MAX_EVENT_BYTES
    from ctxledger.store.validate import coerce_new_event, validate_event

    try:
        normalized, _, _ = validate_event(stream, coerce_new_event(event),
                                          DEFAULT_MAX_EVENT_BYTES)
        check_event(stream, normalized)
    except EventValidationError as exc:
        raise fail(f"{label}: {exc}") from None


def card_import(
    ctx: typer.Context,
    file: CardFile,
    session: SessionOption = None,
    scope: ScopeOption = None,
    format: FormatOption = JsonOrText.json,
) -> None:
    """Set the card of a session or a scope from a card file (one card.set event).

    The card is stored as the file holds it ('card export' gives it back) and replaces
    the whole current card. Prints the card's name, spec, lorebook entries, the stream
    and the position written; each lorebook entry that cannot work as written (a regex
    key RE2 refuses, an invalid one) gets a 'warning:' line on stderr."""
    from ctxledger import render
    from ctxledger.io._card_files import card_set_data, read_card
    from ctxledger.store.character_card import CardFileError, book_entries

    stream = _stream(session, scope)
    try:
        card = read_card(file)
    except CardFileError as exc:
        raise fail(str(exc)) from None
    _checked(stream, {"type": "card.set", "data": card_set_data(card)}, Path(file).name)
    with open_ledger(db_of(ctx)) as ledger, _lorebook_warnings():
        result = ledger.import_card(card, session=session, scope=scope)
    data = card.get("data") if "spec" in card else card
    fields = data if isinstance(data, Mapping) else {}
    record = {"name": fields.get("name"), "spec": card.get("spec", "V1"),
              "lorebook_entries": len(book_entries(fields.get("character_book"))),
              "stream": stream, "position": result.positions[-1]}
    if format is JsonOrText.json:
        typer.echo(render.dumps(record))
    else:
        typer.echo(f"card {record['name']!r} ({record['spec']}, "
                   f"{record['lorebook_entries']} lorebook entries) set on {stream} "
                   f"at position {record['position']}")


def card_export(
    ctx: typer.Context,
    session: SessionOption = None,
    scope: ScopeOption = None,
    output: Annotated[Path | None, typer.Option(
        "--output", "-o", metavar="FILE", dir_okay=False,
        help="Write the JSON to FILE, readable by its owner only (default: stdout).")] = None,
) -> None:
    """Write the current card of a session (the scope's card with the session's own
    fields over it) or of a scope as a card file's JSON: as it was imported, with
    later card.set fields applied."""
    from ctxledger import render

    _stream(session, scope)
    with open_existing(db_of(ctx), load_vocabulary=False) as ledger:
        card = ledger.export_card(session=session, scope=scope)
    text = render.dumps(card, indent=2)
    if output is None:
        typer.echo(text)
        return
    from ctxledger.io._private import open_private

    try:
        with open_private(output) as out:
            out.write(text + "\n")
    except OSError as exc:
        raise fail(f"cannot write {output}: {exc.strerror or exc}") from None


def lorebook_import(
    ctx: typer.Context,
    file: Annotated[str, typer.Argument(
        metavar="FILE",
        help="A lorebook JSON file: a V2 character_book, a lorebook_v3 file, or a"
             " SillyTavern world-info export.")],
    scope: Annotated[str, typer.Option(
        "--scope", metavar="S", help="The scope whose sessions read the book.")],
    book_id: Annotated[str | None, typer.Option(
        "--id", metavar="ID", help="The book's id in the scope (default: the file's stem);"
                                   " an id already set is replaced.")] = None,
    format: FormatOption = JsonOrText.json,
) -> None:
    """Set a lorebook (world info) of a scope from a file (one lorebook.set event).

    A SillyTavern world-info export is converted to a V2 book; other books are stored
    as written. Prints the book id, its entries, the stream and the position written;
    each entry that cannot work as written (a regex key RE2 refuses, an invalid one)
    gets a 'warning:' line on stderr."""
    from ctxledger import render
    from ctxledger.io._card_files import read_lorebook
    from ctxledger.store.character_card import CardFileError, book_entries

    stream = _stream(None, scope)
    name = Path(file).stem if book_id is None else book_id
    try:
        book = read_lorebook(file)
    except CardFileError as exc:
        raise fail(str(exc)) from None
    data = {"book_id": name, "book": book}
    _checked(stream, {"type": "lorebook.set", "data": data}, Path(file).name)
    with open_ledger(db_of(ctx)) as ledger, _lorebook_warnings():
        result = ledger.set_lorebook(scope, name, book)
    record = {"book_id": name, "entries": len(book_entries(book)), "stream": stream,
              "position": result.positions[-1]}
    if format is JsonOrText.json:
        typer.echo(render.dumps(record))
    else:
        typer.echo(f"lorebook {name!r} ({record['entries']} entries) set on {stream} at "
                   f"position {record['position']}")


def lorebook_remove(
    ctx: typer.Context,
    book_id: Annotated[str, typer.Argument(metavar="ID", help="The book's id.")],
    scope: Annotated[str, typer.Option(
        "--scope", metavar="S", help="The scope the book belongs to.")],
) -> None:
    """Remove a lorebook of a scope (one lorebook.removed event); prints the positions
    written."""
    from ctxledger import render

    _stream(None, scope)
    with open_existing(db_of(ctx), load_vocabulary=False) as ledger:
        result = ledger.remove_lorebook(scope, book_id)
    typer.echo(render.dumps(render.append_record(result)))


SUBCOMMANDS: dict[str, tuple[str, dict[str, Callable[..., None]]]] = {
    "card": ("Character card files: import one into a session or scope, export one.",
             {"import": card_import, "export": card_export}),
    "lorebook": ("Scope lorebooks (world info): import one from a file, remove one.",
                 {"import": lorebook_import, "remove": lorebook_remove}),
}
"""Command groups by name: their help, and their commands by name in ``--help`` order."""
