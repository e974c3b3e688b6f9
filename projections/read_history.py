"""A session's chat history for the read view: the summary, the messages after it (or all
of them), and what the profile needs to count the summarized ones.

With a ``history_budget`` the messages are read newest first in pages that grow, and the
read stops once the profile's measure of them is over the budget, so a turn reads
O(window) rows; the messages older than the window are counted, not read (from the
session row, or over the gap after a summary).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson
import sqlalchemy as sa

from ctxledger.projections.session_stats import messages
from ctxledger.projections.session_view import (
    History,
    HistoryMeasure,
    HistorySummary,
    Message,
    MessagePool,
    MessageSet,
    ViewRequest,
)
from ctxledger.projections.token_cache import load_history_memo
from ctxledger.store.chat import content_text
from ctxledger.store.errors import LedgerError
from ctxledger.store.schema import events
from ctxledger.store.sql_engine import driver_statement

# A message row holds what the event lacks; the content, name and time are the event's,
# read by position (the log's primary key) in the same query.
_MESSAGE_SELECT = sa.select(
    messages.c.seq, messages.c.message_id, messages.c.role, messages.c.position,
    events.c.data, events.c.recorded_at, events.c.hash,
).select_from(messages.join(events, events.c.position == messages.c.position))


def _message(row: Mapping[str, Any], pool: MessagePool | None = None) -> Message:
    """The message of ``row``; with ``pool``, the object read before when there is one
    (the same position and chained hash name the same message in any database)."""
    if pool is None:
        return _parse(row)
    key = ("message", row["position"], row["hash"])
    found = pool.lookup(key)
    if isinstance(found, Message) and found.seq == row["seq"]:
        return found
    made = _parse(row)
    pool.remember(key, made)
    return made


def _parse(row: Mapping[str, Any]) -> Message:
    # Every message.appended payload is a current (v2) payload as stored: v1 upcasts to
    # v2 unchanged, so no upcast is needed here.
    data = orjson.loads(row["data"])
    content = data.get("content")
    parts = tuple(content) if isinstance(content, list) else None
    return Message(seq=int(row["seq"]), message_id=row["message_id"], role=row["role"],
                   name=data.get("name"), content=content_text(content),
                   position=int(row["position"]), recorded_at=row["recorded_at"],
                   parts=parts, tool_calls=tuple(data.get("tool_calls") or ()),
                   tool_call_id=data.get("tool_call_id"), is_error=data.get("is_error"))


def _messages(conn: sa.Connection, stream_id: str, after_seq: int | None = None,
              through_seq: int | None = None, pool: MessagePool | None = None
              ) -> tuple[Message, ...]:
    """Non-retracted messages with ``after_seq < seq <= through_seq``, in seq order."""
    return _messages_and_hash(conn, stream_id, after_seq, through_seq, pool)[0]


def _messages_and_hash(conn: sa.Connection, stream_id: str, after_seq: int | None = None,
                       through_seq: int | None = None, pool: MessagePool | None = None
                       ) -> tuple[tuple[Message, ...], str | None]:
    """``_messages``, and the chained hash of the newest one's event (None: none)."""
    rows = driver_statement(conn.dialect, ("history.range",), lambda: _RANGE).fetch_dicts(
        conn, {"stream_id": stream_id, "after_seq": -1 if after_seq is None else after_seq,
               "through_seq": _NO_SEQ_BELOW if through_seq is None else through_seq})
    return tuple(_message(row, pool) for row in rows), (str(rows[-1]["hash"]) if rows
                                                          else None)


# The history window is read newest first in pages that grow, so a short window costs a
# query or two and a long one O(log) queries, never the whole history.
_FIRST_PAGE = 32
_MAX_PAGE = 512


@dataclass(frozen=True, slots=True)
class _Window:
    messages: tuple[Message, ...]
    """Loaded messages, in seq order."""
    unloaded: int
    oldest_unloaded: Message | None


_NO_SEQ_BELOW = 2**31 - 1
"""An upper seq bound above every real one (so one prepared statement serves all pages)."""

_WINDOW_PAGE = (
    _MESSAGE_SELECT
    .where(messages.c.stream_id == sa.bindparam("stream_id"),
           messages.c.retracted.is_(False),
           messages.c.seq > sa.bindparam("after_seq"),
           messages.c.seq < sa.bindparam("below_seq"))
    .order_by(messages.c.seq.desc())
    .limit(sa.bindparam("page"))
)

# seq is the stream version: unique within a session, so it is a total order.
_RANGE = (
    _MESSAGE_SELECT
    .where(messages.c.stream_id == sa.bindparam("stream_id"),
           messages.c.retracted.is_(False),
           messages.c.seq > sa.bindparam("after_seq"),
           messages.c.seq <= sa.bindparam("through_seq"))
    .order_by(messages.c.seq)
)
"""Non-retracted messages with ``after_seq < seq <= through_seq`` (-1 and
``_NO_SEQ_BELOW`` for no bound), in seq order. Compiled once (``driver_statement``), as
every statement of a turn's history read: building and running them through
SQLAlchemy's per-call machinery cost more than these index seeks."""


def _window(conn: sa.Connection, stream_id: str, after_seq: int | None, budget: int,
            measure: HistoryMeasure, whole_units: bool, pool: MessagePool | None
            ) -> tuple[list[Message], bool]:
    """Messages after ``after_seq``, newest first, until ``measure`` of them is over
    ``budget`` (that message included; with ``whole_units``, so are the older messages
    up to the first that is not a tool result, the call its results answer); also
    whether the range's start was reached."""
    loaded: list[Message] = []
    used = 0
    below = _NO_SEQ_BELOW
    page = _FIRST_PAGE
    over = False
    while True:
        batch = [_message(row, pool) for row in driver_statement(
            conn.dialect, ("history.window_page",), lambda: _WINDOW_PAGE).fetch_dicts(conn, {
                "stream_id": stream_id, "after_seq": -1 if after_seq is None else after_seq,
                "below_seq": below, "page": page})]
        if not batch:
            return loaded, True
        costs = list(measure(batch))
        if len(costs) != len(batch):
            raise LedgerError("history_measure must give one cost per message")
        for message, cost in zip(batch, costs, strict=True):
            loaded.append(message)
            used += cost
            if used > budget:
                over = True
            if over and not (whole_units and message.role == "tool"):
                return loaded, False
        if len(batch) < page:
            return loaded, True
        below = batch[-1].seq
        # Size the next page from the average cost so far: about what is still missing.
        average = max(1, used // len(loaded))
        page = min(_MAX_PAGE, max(_FIRST_PAGE, (budget - used) // average + 8))


def _hash_select() -> sa.Select[Any]:
    return sa.select(events.c.hash).where(events.c.position == sa.bindparam("position"))


def _event_hash(conn: sa.Connection, position: int) -> str | None:
    rows = driver_statement(conn.dialect, ("history.event_hash",), _hash_select).fetch(
        conn, {"position": position})
    return str(rows[0][0]) if rows else None


def _whole_history(conn: sa.Connection, session: Mapping[str, Any], request: ViewRequest,
                   pool: MessagePool | None) -> tuple[tuple[Message, ...], MessageSet | None]:
    """Every non-retracted message, reading only those after the probe's set when it is a
    prefix of this session (see ``ViewRequest.history_probe``); and the set to keep."""
    stream_id = session["stream_id"]
    retracted = int(session["messages_retracted"])
    base = None if request.history_probe is None else request.history_probe(stream_id)
    if base is not None and base.stream_id == stream_id and base.retracted == retracted \
            and _event_hash(conn, base.messages[-1].position) == base.event_hash:
        newer, newest = _messages_and_hash(conn, stream_id, after_seq=base.messages[-1].seq,
                                           pool=pool)
        # No message before the base's newest was retracted or replaced (the count), so
        # the base plus what follows it is the whole history (unless the counts disagree:
        # a stream erased and written again, say; then it is read whole).
        if len(base.messages) + len(newer) == int(session["messages_total"]):
            if newest is None:
                return base.messages, base
            whole = base.messages + newer
            return whole, MessageSet(stream_id, whole, newest, retracted)
    loaded, newest = _messages_and_hash(conn, stream_id, pool=pool)
    if newest is None or request.history_probe is None:
        return loaded, None
    return loaded, MessageSet(stream_id, loaded, newest, retracted)


def _load_window(conn: sa.Connection, session: Mapping[str, Any], after_seq: int | None,
                 request: ViewRequest, pool: MessagePool | None) -> _Window:
    """The history window for ``request``, with the count and oldest of what it left out."""
    stream_id = session["stream_id"]
    if request.history_budget is None or request.history_measure is None:
        return _Window(_messages(conn, stream_id, after_seq=after_seq, pool=pool), 0, None)
    newest_first, reached = _window(conn, stream_id, after_seq, request.history_budget,
                                    request.history_measure, request.history_whole_units,
                                    pool)
    loaded = tuple(reversed(newest_first))
    if reached or not loaded:
        return _Window(loaded, 0, None)
    older = [messages.c.stream_id == stream_id, messages.c.retracted.is_(False),
             messages.c.seq < loaded[0].seq]
    if after_seq is not None:
        older.append(messages.c.seq > after_seq)
    if after_seq is None:
        # Every non-retracted message is in range: the session row counts them.
        unloaded = int(session["messages_total"]) - len(loaded)
    else:
        # A gap between a summary and the window: counted over the gap alone, which the
        # assembly reports as something to summarize.
        unloaded = int(conn.execute(
            sa.select(sa.func.count()).select_from(messages).where(*older)).scalar_one())
    if unloaded <= 0:
        return _Window(loaded, 0, None)
    oldest = conn.execute(_MESSAGE_SELECT.where(*older).order_by(messages.c.seq)
                          .limit(1)).mappings().first()
    return _Window(loaded, unloaded, None if oldest is None else _message(dict(oldest), pool))


def load_history(conn: sa.Connection, session: Mapping[str, Any], request: ViewRequest) -> History:
    """The chat history for ``request.history`` (``tail`` or ``full``), windowed when the
    request has a ``history_budget``."""
    stream_id = session["stream_id"]
    summary = None
    if session["summary_position"] is not None:
        summary = HistorySummary(
            summary=session["summary_text"],
            through_message_id=session["summary_through_message_id"],
            through_seq=session["summary_through_seq"],
            position=int(session["summary_position"]))
    through = None if summary is None else summary.through_seq
    total = int(session["messages_total"])
    pool = None if request.message_pool is None else request.message_pool(stream_id)
    if request.history == "full" or through is None:
        if request.history_budget is None or request.history_measure is None:
            whole, message_set = _whole_history(conn, session, request, pool)
            return History(summary=summary, messages=whole, complete=True,
                           summarized_count=(0 if through is None else
                                             sum(1 for m in whole if m.seq <= through)),
                           message_set=message_set)
        window = _load_window(conn, session, None, request, pool)
        loaded = window.messages
        complete = window.unloaded == 0
        if through is None:
            summarized = 0
        elif complete:
            summarized = sum(1 for m in loaded if m.seq <= through)
        else:
            summarized = int(conn.execute(
                sa.select(sa.func.count()).select_from(messages).where(
                    messages.c.stream_id == stream_id, messages.c.retracted.is_(False),
                    messages.c.seq <= through)).scalar_one())
        return History(summary=summary, messages=loaded, complete=complete,
                       summarized_count=summarized, unloaded=window.unloaded,
                       oldest_unloaded=window.oldest_unloaded)
    window = _load_window(conn, session, through, request, pool)
    tail = window.messages
    # messages_total counts the session's non-retracted messages, so the summarized ones
    # are the rest: no need to count the (possibly long) summarized prefix.
    summarized = total - len(tail) - window.unloaded
    prefix_tokens: int | None = None
    prefix_through = 0
    summarized_messages: tuple[Message, ...] = ()
    total_retracted = int(session["messages_retracted"])

    def retracted_at(seq: int) -> int:
        # Retracted messages with seq <= `seq`: the total minus those after it (a range
        # of the (stream_id, seq) index that is the tail when `seq` is a recent summary).
        after = conn.execute(sa.select(sa.func.count()).select_from(messages).where(
            messages.c.stream_id == stream_id, messages.c.seq > seq,
            messages.c.retracted.is_(True))).scalar_one()
        return total_retracted - int(after)

    summarized_retracted = retracted_at(through)
    if request.token_encoding is not None:
        memo = load_history_memo(conn, stream_id=stream_id, encoding=request.token_encoding,
                                 through_seq=through, retracted_at=retracted_at)
        if memo is not None:
            prefix_tokens, prefix_through = memo.tokens, memo.through_seq
        summarized_messages = _messages(conn, stream_id, after_seq=prefix_through,
                                        through_seq=through, pool=pool)
    return History(summary=summary, messages=tail,
                   complete=summarized == 0 and window.unloaded == 0,
                   summarized_count=summarized, prefix_tokens=prefix_tokens,
                   prefix_through_seq=prefix_through, summarized_retracted=summarized_retracted,
                   summarized_messages=summarized_messages, unloaded=window.unloaded,
                   oldest_unloaded=window.oldest_unloaded)


def live_message_seqs(conn: sa.Connection, stream_id: str, last: int | None = None
                      ) -> list[int]:
    """The ``seq`` (stream version) of each non-retracted message of the stream, in
    order; with ``last``, only the newest ``last`` of them."""
    query = (sa.select(messages.c.seq)
             .where(messages.c.stream_id == stream_id, messages.c.retracted.is_(False))
             .order_by(messages.c.seq.desc()))
    if last is not None:
        query = query.limit(last)
    return sorted(int(seq) for seq in conn.execute(query).scalars())
