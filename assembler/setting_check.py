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
- Keys no profile reads are the application's own and are not checked.
"""

from __future__ import annotations

from typing import Any

from ctxledger.assembler.policy import GENERIC_SETTING_PREFIX, PolicyError
from ctxledger.assembler.profiles import get_profile, profile_names

PROFILE_SETTING = "profile"
"""The setting ``assemble`` takes its profile from when none is given."""


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
        if key in policy_type.SETTINGS or key == f"{GENERIC_SETTING_PREFIX}{name}":
            policy_type.from_settings({key: value})
