"""Test helpers behind the pytest plugin: an in-memory ledger, event builders and a
decision assertion. Usable without pytest too.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from ctxledger.store.catalog import CATALOG, parse_data
from ctxledger.store.clock import Clock, system_clock
from ctxledger.store.errors import EventValidationError
from ctxledger.store.validate import describe_validation_error

if TYPE_CHECKING:
    from ctxledger._ledger import Ledger
    from ctxledger.assembler.model import Assembly


def memory_ledger(clock: Clock = system_clock) -> Ledger:
    """A ledger on a new in-memory SQLite copy of the migrated schema.

    The schema is migrated once per process into a template and copied per ledger. The
    default clock reads the time at every append, so ``freezegun`` controls it.
    """
    from ctxledger._ledger import Ledger
    from ctxledger._scratch import scratch_engine

    ledger = Ledger(scratch_engine(), clock=clock)
    # Fixture setup runs before a freeze in the test body: get the models defined now.
    ledger.prepare_assembler()
    return ledger


class EventBuilders:
    """``{"type", "data"}`` mappings for every event type, checked as they are built.

    Every catalog type is a method named after it: ``tool_used(tool_name="Bash")`` builds
    ``tool.used``; ``event("tool.used", tool_name="Bash")`` does the same by name. A
    misspelt field or a bad value fails at the builder's line, not at the append.
    ``message(content, role="user")`` and ``setting(key, value)`` are shorthands.
    """

    def event(self, type_name: str, /, **data: Any) -> dict[str, Any]:
        """The event ``type_name`` with ``data`` (validated against the catalog)."""
        if type_name not in CATALOG:
            raise EventValidationError(f"unknown event type {type_name!r}")
        try:
            parse_data(type_name, data)
        except ValidationError as exc:
            raise EventValidationError(f"{type_name}: {describe_validation_error(exc)}"
                                       ) from None
        return {"type": type_name, "data": data}

    def types(self) -> list[str]:
        """Every event type a builder exists for."""
        return sorted(CATALOG)

    def message(self, content: str, role: str = "user", **data: Any) -> dict[str, Any]:
        """``message.appended`` (role ``user`` unless given)."""
        return self.event("message.appended", role=role, content=content, **data)

    def setting(self, key: str, value: Any) -> dict[str, Any]:
        """``setting.changed``."""
        return self.event("setting.changed", key=key, value=value)

    def __getattr__(self, name: str) -> Any:
        type_name = name.replace("_", ".", 1)
        if name.startswith("_") or type_name not in CATALOG:
            raise AttributeError(
                f"no event builder {name!r} (types: {', '.join(sorted(CATALOG))})")

        def build(**data: Any) -> dict[str, Any]:
            return self.event(type_name, **data)

        build.__name__ = name
        build.__doc__ = f"``{type_name}`` with the given fields."
        return build

    def __dir__(self) -> list[str]:
        return sorted({*super().__dir__(), *(t.replace(".", "_") for t in CATALOG)})


Expected = str | tuple[str, str]
"""An action (``"expired"``), or an action and reason (``("expired", "...")``)."""


def assert_decisions(assembly: Assembly, expected: Mapping[str, Expected]) -> None:
    """Fail, listing every difference, unless each item got the action (and reason) given."""
    found = {d.item: d for d in assembly.decisions}
    problems = []
    for item, want in expected.items():
        decision = found.get(item)
        if decision is None:
            problems.append(f"{item}: no decision (items: {', '.join(sorted(found))})")
            continue
        action, reason = (want, None) if isinstance(want, str) else want
        if decision.action != action or (reason is not None and decision.reason != reason):
            wanted = action if reason is None else f"{action} ({reason})"
            problems.append(f"{item}: expected {wanted}, got {decision.action} "
                            f"({decision.reason}) {dict(decision.detail)}")
    if problems:
        raise AssertionError("assembly decisions differ:\n  " + "\n  ".join(problems))
