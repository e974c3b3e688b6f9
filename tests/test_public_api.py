"""``ctxledger`` exports what ``Ledger`` takes, returns and raises, so callers annotate
without importing private modules; the names load lazily, on first use."""

from __future__ import annotations

import inspect
import subprocess
import sys
import typing

import ctxledger
from ctxledger import Ledger


def test_every_exported_name_resolves_to_what_it_names() -> None:
    for name in ctxledger.__all__:
        value = getattr(ctxledger, name)
        assert getattr(value, "__name__", name) == name, name


def _classes(hint: object) -> set[type]:
    """Every class in a type hint (``list[X]``, ``X | None``...)."""
    found = {hint} if isinstance(hint, type) else set()
    for arg in typing.get_args(hint):
        found |= _classes(arg)
    return found


def test_what_ledger_methods_return_is_exported() -> None:
    names = vars(sys.modules[Ledger.__module__]) | {
        n: getattr(ctxledger, n) for n in ctxledger.__all__}
    returned: set[type] = set()
    for name, method in inspect.getmembers(Ledger, inspect.isfunction):
        hint = method.__annotations__.get("return")
        if not name.startswith("_") and isinstance(hint, str):
            returned |= _classes(eval(hint, names))
    own = {t.__name__ for t in returned if t.__module__.startswith("ctxledger.")}
    assert {"Assembly", "WhyReport", "UsageReport", "VerifyReport"} <= own
    assert own <= set(ctxledger.__all__)


def test_importing_the_package_loads_none_of_them() -> None:
    probe = ("import sys, ctxledger; print(sorted(m for m in sys.modules"
             " if m.startswith(('ctxledger._', 'ctxledger.jobs', 'ctxledger.timetravel'))))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          check=True)
    assert done.stdout.strip() == "[]"
