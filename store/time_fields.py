"""Pydantic field types for instants that hold under freezegun.

freezegun replaces ``datetime.datetime`` with its ``FakeDatetime`` while a clock is frozen,
in the ``datetime`` module and in every loaded module's globals. A model defined then (a
module first imported inside ``freeze_time``) would resolve ``datetime`` to that class, for
which pydantic has no schema. ``Instant`` names its schema directly, so a model holds
whenever and wherever it is defined; every pydantic model with a time field uses it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import GetCoreSchemaHandler, GetPydanticSchema
from pydantic_core import CoreSchema, core_schema


def _datetime_schema(_source: object, _handler: GetCoreSchemaHandler) -> CoreSchema:
    return core_schema.datetime_schema()


Instant = Annotated[datetime, GetPydanticSchema(_datetime_schema)]
"""A ``datetime`` field whose schema does not depend on what ``datetime`` is right now."""
