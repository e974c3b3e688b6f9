"""The built-in projections, in a fixed order.

Importing this module defines every projection table (plus the checkpoint and token cache
tables) on ``projections.base.metadata``, which migrations and schema checks compare against.
"""

from __future__ import annotations

from ctxledger.projections import checkpoints as checkpoints
from ctxledger.projections import token_cache as token_cache
from ctxledger.projections.base import Projection
from ctxledger.projections.card import CardProjection
from ctxledger.projections.context_items import ContextItemsProjection
from ctxledger.projections.documents import DocumentsProjection
from ctxledger.projections.knowledge import KnowledgeProjection
from ctxledger.projections.lorebooks import LorebooksProjection
from ctxledger.projections.observations import ObservationsProjection
from ctxledger.projections.scope_members import ScopeMembersProjection
from ctxledger.projections.session_stats import SessionStatsProjection
from ctxledger.projections.settings import SettingsProjection
from ctxledger.projections.tool_registry import ToolRegistryProjection
from ctxledger.projections.tool_usage import ToolUsageProjection
from ctxledger.projections.usage_rollups import UsageRollupsProjection

BUILTIN_PROJECTION_TYPES: tuple[type[Projection], ...] = (
    SessionStatsProjection,
    SettingsProjection,
    ToolRegistryProjection,
    ToolUsageProjection,
    UsageRollupsProjection,
    CardProjection,
    ContextItemsProjection,
    ObservationsProjection,
    DocumentsProjection,
    KnowledgeProjection,
    ScopeMembersProjection,
    LorebooksProjection,
)
"""Every built-in projection class, in the order they are applied to each event."""


def builtin_projections() -> list[Projection]:
    """A fresh instance of every built-in projection."""
    return [cls() for cls in BUILTIN_PROJECTION_TYPES]


def builtin_names() -> tuple[str, ...]:
    """The names of the built-in projections, in order."""
    return tuple(cls.name for cls in BUILTIN_PROJECTION_TYPES)
