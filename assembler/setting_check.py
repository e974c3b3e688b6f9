"""Setting values checked against the policies that read them, before they are stored.

A ``setting.changed`` whose value no profile could assemble with (``compression_level
"ultra"``, ``context_limit -5``, a ``card_template`` that does not parse, a
``policy.<profile>`` object with an unknown field...) would make every later assembly of
the session, or of every session of the scope, fail. ``check_setting`` refuses it with
the same one-line verdict the assembly would give, because it asks the very policy models
the assembler builds (``Policy.from_settings``): there is no second list of rules.

- A key is checked by every registered profile that reads it: a named setting in its
  ``SETTINGS`` (``context_limit``), its ``policy.<profile>`` object, and ``profile``
  (the profile ``assemble`` uses when none is given) must name a registered profile.
- The value is judged on its own, over the policy's defaults, never against the other
  settings the stream holds: the verdict is the same on every backend, before a database
  is opened, and whatever order settings come in. A named value that is valid only with a
  ``policy.<profile>`` override (a compression level the override adds to ``levels``)
  goes inside that override; a combination that fails only together still fails its
  assemblies with the same one-line error.
- Keys no profile reads are not checked, but they are named: an assembly of a session
  that has one warns about it, and so does the append that writes one
  (``unknown_setting_warning``, with the nearest known key, so a typo such as
  ``compresion_level`` is seen). An application keeps keys of its own under
  ``app.`` (``APP_SETTING_PREFIX``), which are never named.
- A profile's ``LEGACY_SETTINGS`` (the card's ``compressionEnabled``) are read and
  checked like its named settings.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from functools import cache, lru_cache
from typing import Any, Literal, NamedTuple

from ctxledger.assembler.policy import GENERIC_SETTING_PREFIX, PolicyError
from ctxledger.assembler.profiles import get_profile, profile_names
from ctxledger.projections.setting_names import AGENT_MANIFESTS

PROFILE_SETTING = "profile"
"""The setting ``assemble`` takes its profile from when none is given."""
UNKNOWN_KEYS_REMEMBERED = 256
"""How many unknown keys' warnings are kept per process (each is worded once)."""
APP_SETTING_PREFIX = "app."
"""Setting keys of the application's own: no profile reads them and none is warned of."""


DEFAULT_PROFILE = "card"
"""The profile of a session whose settings name none (``Ledger.assemble``'s default)."""
CODING_AGENT_PROFILE = "session"
"""The default of the coding-agent surfaces (the MCP server, the Claude Code hook)."""


class ProfileChoice(NamedTuple):
    """The profile an assembly uses, and where it came from."""

    name: str
    source: Literal["given", "setting", "default"]


def choose_profile(given: str | None, settings: Mapping[str, Any],
                   default: str | None = DEFAULT_PROFILE) -> ProfileChoice:
    """The one rule every surface resolves a profile with: ``given``, else the
    ``profile`` setting, else ``default``. An unknown name, a setting that names no
    profile, or (``default=None``) no profile at all is a one-line ``LedgerError``."""
    if given is not None:
        get_profile(given)  # an unknown name: the registry's one-line AssemblyError
        return ProfileChoice(given, "given")
    names = profile_names()
    value = settings.get(PROFILE_SETTING)
    if value is not None:
        if not isinstance(value, str) or value not in names:
            raise PolicyError(f"the session's {PROFILE_SETTING!r} setting is {value!r}, not "
                              f"one of {', '.join(names)}")
        return ProfileChoice(value, "setting")
    if default is None:
        raise PolicyError(f"no profile given and the session has no {PROFILE_SETTING!r} "
                          f"setting (one of {', '.join(names)})")
    return ProfileChoice(default, "default")


def known_setting_keys() -> tuple[str, ...]:
    """Every setting key something reads, sorted: ``profile``, ``agent_manifests``, and
    each registered profile's named, legacy and ``policy.<profile>`` keys."""
    return _known_keys(tuple(profile_names()))


@cache
def _known_keys(names: tuple[str, ...]) -> tuple[str, ...]:
    # Keyed by the registered profiles: a profile registered later adds its keys.
    keys = {PROFILE_SETTING, AGENT_MANIFESTS}
    for name in names:
        policy_type = get_profile(name).policy_type
        keys.update(policy_type.SETTINGS, policy_type.LEGACY_SETTINGS,
                    {f"{GENERIC_SETTING_PREFIX}{name}"})
    return tuple(sorted(keys))


def unknown_setting_warning(key: str) -> str | None:
    """One line naming ``key`` when nothing reads it (with the nearest known key), else
    None; ``app.`` keys are the application's and never named."""
    known = known_setting_keys()
    if key in known or key.startswith(APP_SETTING_PREFIX):
        return None
    return _unknown(key, known)


@lru_cache(maxsize=UNKNOWN_KEYS_REMEMBERED)
def _unknown(key: str, known: tuple[str, ...]) -> str:
    # difflib costs about a millisecond a key: every assembly of the session asks again.
    near = difflib.get_close_matches(key, known, n=1)
    hint = (f"did you mean {near[0]!r}?" if near
            else f"a key of the application's own goes under {APP_SETTING_PREFIX!r}")
    return f"setting {key!r} is not read by any profile ({hint})"


def unknown_setting_warnings(keys: Iterable[str]) -> list[str]:
    """``unknown_setting_warning`` for each of ``keys`` that has one, in key order, each
    key once."""
    found = (unknown_setting_warning(key) for key in sorted(set(keys)))
    return [line for line in found if line is not None]


def check_setting(key: str, value: Any) -> None:
    """Raise ``PolicyError`` (one line) when no assembly could use ``value`` for ``key``."""
    names = profile_names()
    if key == PROFILE_SETTING:
        if not isinstance(value, str) or value not in names:
            raise PolicyError(f"setting {PROFILE_SETTING!r} is {value!r}, not one of "
                              f"{', '.join(names)}")
        return
    for name in names:
        policy_type = get_profile(name).policy_type
        if key in policy_type.SETTINGS or key in policy_type.LEGACY_SETTINGS \
                or key == f"{GENERIC_SETTING_PREFIX}{name}":
            policy_type.from_settings({key: value})
