"""The built-in projections, in a fixed order."""

from __future__ import annotations

from projections.base import Projection


def builtin_projections() -> list[Projection]:
    """A fresh instance of every built-in projection."""
    from projections.session_stats import SessionStatsProjection

    return [SessionStatsProjection()]
