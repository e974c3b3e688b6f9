"""The profile registry: every profile the assembler knows, by name.

A new profile (``novel``, ``brief``) is a module or folder with its ``Profile`` subclass,
``Policy`` subclass and report model, plus one line in ``_REGISTERED`` below; the engine,
policies, api, digest, facade and CLI serve it unchanged.
"""

from __future__ import annotations

from ctxledger.assembler.errors import AssemblyError
from ctxledger.assembler.profiles.base import Profile
from ctxledger.assembler.profiles.brief import BriefPolicy, BriefProfile
from ctxledger.assembler.profiles.card import CardPolicy, CardProfile
from ctxledger.assembler.profiles.novel import NovelPolicy, NovelProfile
from ctxledger.assembler.profiles.session import SessionPolicy, SessionProfile

_REGISTERED: tuple[Profile, ...] = (
    CardProfile(),
    SessionProfile(),
    BriefProfile(),
    NovelProfile(),
)
_PROFILES: dict[str, Profile] = {profile.name: profile for profile in _REGISTERED}


def profile_names() -> list[str]:
    """Names of the registered profiles, sorted."""
    return sorted(_PROFILES)


def profiles_showing_state() -> list[str]:
    """Names of the registered profiles with a state section (``Profile.shows_state``)."""
    return [name for name in profile_names() if _PROFILES[name].shows_state]


def get_profile(name: str) -> Profile:
    """The profile called ``name``; an unknown name is a one-line ``AssemblyError``."""
    profile = _PROFILES.get(name)
    if profile is None:
        raise AssemblyError(f"unknown profile {name!r} (known: {', '.join(profile_names())})")
    return profile


__all__ = ["BriefPolicy", "BriefProfile", "CardPolicy", "CardProfile", "NovelPolicy",
           "NovelProfile", "Profile", "SessionPolicy", "SessionProfile", "get_profile",
           "profile_names", "profiles_showing_state"]
