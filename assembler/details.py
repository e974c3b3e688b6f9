"""Decision details as they are recorded: JSON scalars (or lists of them), datetimes in
the one UTC form, floats rounded (``ranking.round_score``), non-finite numbers refused."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from ctxledger.assembler.errors import EngineError
from ctxledger.assembler.model import DetailScalar, DetailValue
from ctxledger.assembler.ranking import round_score
from ctxledger.store.clock import format_utc

DetailInput = int | float | str | bool | datetime | None | Sequence[Any]
"""What a profile may pass as a detail."""


def _detail_scalar(value: Any) -> DetailScalar:
    if isinstance(value, datetime):
        return format_utc(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise EngineError(f"non-finite number in a decision detail: {value!r}")
        return round_score(value)
    if value is None or isinstance(value, int | str | bool):
        return value
    raise EngineError(f"a decision detail must be a scalar, got {type(value).__name__}")


TYPE_CODES: dict[type, int] = {int: 0, float: 1, bool: 2, str: 3, type(None): 4}
"""Detail value types as plain numbers, for memo keys (``Engine._final_decision``)."""

_PLAIN = (int, str, bool, type(None))
"""Detail values passed through as they are (checked first: an ABC ``isinstance`` such
as ``Sequence`` costs far more, and every candidate has several details)."""


def detail_values(detail: Mapping[str, DetailInput]) -> dict[str, DetailValue]:
    """Decision details as they are recorded (datetimes formatted, floats rounded)."""
    return {key: detail_value(value) for key, value in detail.items()}


def detail_value(value: DetailInput) -> DetailValue:
    """One decision detail as it is recorded."""
    if type(value) in _PLAIN:
        return value  # type: ignore[return-value]
    if isinstance(value, Sequence) and not isinstance(value, str):
        return [_detail_scalar(part) for part in value]
    return _detail_scalar(value)
