"""Wheel build hook: the repository's top-level folders go inside the ``ctxledger`` package.

hatchling's ``force-include`` would do this, but it also copies them into an editable
install, which then no longer reads the checkout; ``sources`` cannot rename a prefix in
editable mode at all. So a standard wheel gets the folders here, and an editable install
gets a ``.pth`` that imports ``scripts/editable/_ctxledger_editable.py``, which maps the
one name ``ctxledger`` (its ``__init__`` finds the folders beside it).
"""

from __future__ import annotations

from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

FOLDERS = ("store", "projections", "assembler", "migrations", "examples")


class PackageFolders(BuildHookInterface):  # type: ignore[type-arg]
    """Maps ``store/`` to ``ctxledger/store/`` (and so on) in a standard wheel."""

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        """Add the folders to ``force_include``; to an editable wheel, the finder's ``.pth``."""
        if version == "editable":
            pth = f"{self.root}/scripts/editable/ctxledger_editable.pth"
            # After hatchling's _ctxledger.pth (sorted by name), which puts its folder on
            # sys.path.
            build_data["force_include_editable"][pth] = "_ctxledger_editable.pth"
            return
        for folder in FOLDERS:
            build_data["force_include"][f"{self.root}/{folder}"] = f"ctxledger/{folder}"
