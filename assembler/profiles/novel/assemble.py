"""The ``novel`` assembly of one turn: the session memo's kept ``BookState`` for the policy
brought up to date (``book``), then read out (``readout``) and sealed."""

from __future__ import annotations

from datetime import datetime

from ctxledger.assembler.decision_engine import Engine
from ctxledger.assembler.model import Assembly
from ctxledger.assembler.profiles.novel.book import BookState
from ctxledger.assembler.profiles.novel.policy import NovelPolicy
from ctxledger.assembler.profiles.novel.readout import read_out
from ctxledger.projections.session_view import SessionView
from ctxledger.store.canonical import canonical_json

STATES = 2
"""Book states kept per session (one per policy recently assembled under)."""


def assemble_book(engine: Engine, view: SessionView, now: datetime,
                  policy: NovelPolicy) -> Assembly:
    """The ``novel`` assembly of ``view``: the session memo's state for this policy
    brought up to date (a new state without one), then read out and sealed."""
    memo = engine.memo_for(view.stream_id)
    key = ("novel", canonical_json(policy.model_dump(mode="json")), engine.counter.encoding)
    state = memo.state(key)
    if not isinstance(state, BookState):
        state = BookState(policy, engine.counter.count(policy.separator))
    built = [0]
    try:
        state.update(view, engine, built)
        result = read_out(state, engine, view, now)
    except BaseException:
        # A half-updated state must not be read again: the next assembly starts afresh.
        memo.forget_state(key)
        raise
    memo.keep_state(key, state, STATES)
    memo.built += built[0]
    memo.assembled()
    return result
