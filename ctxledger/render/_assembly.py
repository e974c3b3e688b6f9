"""Rich views of an ``Assembly`` for ``ctxledger assemble --format text``.

The breakdown is the profile's own (``Profile.render``); this module adds what every
assembly shares: warnings, a footer with the digest, and optionally the context text.
"""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.panel import Panel
from rich.text import Text

from ctxledger.assembler.model import Assembly
from ctxledger.assembler.profiles import get_profile
from ctxledger.store.clock import format_utc


def assembly_view(assembly: Assembly, *, show_text: bool = False,
                  text: str | None = None) -> RenderableType:
    """The profile's breakdown, warnings, a one-line footer, and the text if asked (the
    assembly's, or ``text``: an agent's context, say)."""
    body = get_profile(assembly.profile).render(assembly)
    footer = Text(
        f"{assembly.profile} | policy {assembly.policy_version} | position "
        f"{assembly.position} | now {format_utc(assembly.now)} | {assembly.tokens.total} "
        f"tokens ({assembly.tokens.encoding}) | digest {assembly.digest[:16]}",
        style="dim")
    warnings = [Text(f"warning: {w}", style="yellow") for w in assembly.warnings]
    parts: list[RenderableType] = [body, *warnings, footer]
    if show_text:
        shown = assembly.text if text is None else text
        parts.append(Panel(Text(shown), title="context", title_align="left"))
    return Group(*parts)
