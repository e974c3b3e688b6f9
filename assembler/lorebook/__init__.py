"""Lorebooks (world info): a book read from its JSON as written (``book``), its keys
matched against texts (``matching``), and which entries activate for a chat and fit the
book's token budget (``activation``). Pure: no database, no clock."""

from ctxledger.assembler.lorebook.activation import (
    ACTIVE,
    Activation,
    ScanMessage,
    Status,
    activate,
    fit_budget,
)
from ctxledger.assembler.lorebook.book import (
    Book,
    Entry,
    Interner,
    LorebookWarning,
    Position,
    Role,
    book_warnings,
    parse_book,
)
from ctxledger.assembler.lorebook.matching import Matcher, compile_key, encode_text

__all__ = [
    "ACTIVE",
    "Activation",
    "Book",
    "Entry",
    "Interner",
    "LorebookWarning",
    "Matcher",
    "Position",
    "Role",
    "ScanMessage",
    "Status",
    "activate",
    "book_warnings",
    "compile_key",
    "encode_text",
    "fit_budget",
    "parse_book",
]
