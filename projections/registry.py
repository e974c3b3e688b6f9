"""The built-in projections, in a fixed order.

Importing this module defines every projection table (plus the checkpoint and token cache
tables) on ``projections.base.metadata``, which migrations and schema checks compare against.
"""

from __future__ import annotations

from projections import checkpoints as checkpoints
from projections import token_cache as token_cache
from projections.base import Projection
from projections.card import CardProjection
from projections.context_items import ContextItemsProjection
from projections.documents import DocumentsProjection
from projections.knowledge import KnowledgeProjection
from projections.observations import ObservationsProjection
from projections.scope_members import ScopeMembersProjection
from projections.session_stats import SessionStatsProjection
from projections.settings import SettingsProjection
from projections.tool_registry import ToolRegistryProjection
from projections.tool_usage import ToolUsageProjection
from projections.usage_rollups import UsageRollupsProjection

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
)
"""Every built-in projection class, in the order they are applied to each event."""


def builtin_projections() -> list[Projection]:
    """A fresh instance of every built-in projection."""
    return [cls() for cls in BUILTIN_PROJECTION_TYPES]


def builtin_names() -> tuple[str, ...]:
    """The names of the built-in projections, in order."""
    return tuple(cls.name for cls in BUILTIN_PROJECTION_TYPES)
