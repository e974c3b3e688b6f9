"""An editable install of ctxledger: the name ``ctxledger`` is the checkout's package.

Only that one name is mapped, so the checkout's ``store/`` and its siblings are never
importable by their bare names (``ctxledger/__init__.py`` finds them itself). Written by
hand rather than taken from ``editables``: its finder imports ``importlib.abc`` and with
it ``importlib.resources`` at every interpreter start, about 5 ms on ``ctxledger
--version``; ``importlib.machinery`` is already loaded.
"""

from __future__ import annotations

import os
import sys
from importlib.machinery import ModuleSpec, PathFinder

# os.path, not pathlib: this runs at every interpreter start, which need not load pathlib.
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))
"""The checkout: this file is ``scripts/editable/`` in it."""


class CheckoutFinder:
    """Finds ``ctxledger`` in the checkout, after every other finder has had its turn."""

    @staticmethod
    def find_spec(name: str, path: object = None, target: object = None) -> ModuleSpec | None:
        """The checkout's ``ctxledger`` package; nothing else."""
        return PathFinder.find_spec(name, [ROOT]) if name == "ctxledger" else None


if CheckoutFinder not in sys.meta_path:
    sys.meta_path.append(CheckoutFinder)
