"""Wheel build hook: the repository's top-level folders go inside the ``ctxledger`` package.

Only a standard wheel gets them. An editable one maps the name ``ctxledger`` to the
checkout (``dev-mode-exact``), whose ``__init__`` finds the folders beside it; hatchling's
``force-include`` would copy them into the editable wheel as well, and ``sources`` may not
rename a prefix in an editable build.
"""

from __future__ import annotations

from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

FOLDERS = ("store", "projections", "assembler", "migrations", "examples")


class PackageFolders(BuildHookInterface):  # type: ignore[type-arg]
    """Maps ``store/`` to ``ctxledger/store/`` (and so on) in a standard wheel."""

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        """Add the folders to ``force_include`` unless the wheel is an editable one."""
        if version == "standard":
            for folder in FOLDERS:
                build_data["force_include"][f"{self.root}/{folder}"] = f"ctxledger/{folder}"
