"""The profile registry: every profile the assembler knows, by name.

A new profile (``novel``, ``brief``) is a module or folder with its ``Profile`` subclass,
``Policy`` subclass and report model, plus one line in ``_REGISTERED`` below; the engine,
policies, api, digest, facade and CLI serve it unchanged.

A profile's package is imported the first time it is asked for (``get_profile``), as are
the classes exported here (PEP 562): assembling a ``session`` (as every Claude Code session
start does) never pays for the brief profile's numpy and BM25, nor the card's lorebook.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from ctxledger.assembler.errors import AssemblyError
from ctxledger.assembler.profiles.base import Profile
from ctxledger.store.lazy import lazy_exports

if TYPE_CHECKING:
    from ctxledger.assembler.profiles.brief import BriefPolicy, BriefProfile
    from ctxledger.assembler.profiles.card import CardPolicy, CardProfile
    from ctxledger.assembler.profiles.novel import NovelPolicy, NovelProfile
    from ctxledger.assembler.profiles.session import SessionPolicy, SessionProfile

# Each profile's name, its package (relative to this one) and its Profile class, in the
# order they were added.
_REGISTERED: tuple[tuple[str, str, str], ...] = (
    ("card", ".card", "CardProfile"),
    ("session", ".session", "SessionProfile"),
    ("brief", ".brief", "BriefProfile"),
    ("novel", ".novel", "NovelProfile"),
)
_PACKAGES: dict[str, tuple[str, str]] = {name: (package, cls)
                                         for name, package, cls in _REGISTERED}
_PROFILES: dict[str, Profile] = {}


def profile_names() -> list[str]:
    """Names of the registered profiles, sorted."""
    return sorted(_PACKAGES)


def profiles_showing_state() -> list[str]:
    """Names of the registered profiles with a state section (``Profile.shows_state``)."""
    return [name for name in profile_names() if get_profile(name).shows_state]


def get_profile(name: str) -> Profile:
    """The profile called ``name``; an unknown name is a one-line ``AssemblyError``."""
    profile = _PROFILES.get(name)
    if profile is not None:
        return profile
    found = _PACKAGES.get(name)
    if found is None:
        raise AssemblyError(f"unknown profile {name!r} (known: {', '.join(profile_names())})")
    package, cls = found
    made: Profile = getattr(importlib.import_module(package, __name__), cls)()
    return _PROFILES.setdefault(name, made)


__all__ = ["BriefPolicy", "BriefProfile", "CardPolicy", "CardProfile", "NovelPolicy",
           "NovelProfile", "Profile", "SessionPolicy", "SessionProfile", "get_profile",
           "profile_names", "profiles_showing_state"]

__getattr__ = lazy_exports(__name__, {
    **dict.fromkeys(["BriefPolicy", "BriefProfile"], ".brief"),
    **dict.fromkeys(["CardPolicy", "CardProfile"], ".card"),
    **dict.fromkeys(["NovelPolicy", "NovelProfile"], ".novel"),
    **dict.fromkeys(["SessionPolicy", "SessionProfile"], ".session"),
}, globals())
