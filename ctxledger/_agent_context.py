"""What "the context for an agent" means, once for every surface.

An agent-scoped context is the profile's assembly, unchanged (its digest, decisions and
text are the assembly's), followed by the session's state scoped by the agent's manifest
(``projections.agents.scope_state``) at the assembly's ``now``:

    <the assembly's text>

    [ctxledger - Agent state: AGENT]
    {"_agent":"AGENT","_savings":{...},...}

The state is compact JSON with sorted keys, so the text is the same bytes on every surface
(CLI ``assemble --agent``, HTTP ``/assemble?agent=``, MCP ``session_context``, the Claude
Code hook). A surface with a size cap (the hook's) passes ``limit``: a state block that
would pass it is replaced by one line naming the command that prints it. Without an agent
the context is the assembly alone.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ctxledger.store.errors import InvalidArgument

if TYPE_CHECKING:
    from ctxledger.assembler.model import Assembly


def state_header(agent: str) -> str:
    """The line that opens an agent's state block."""
    return f"[ctxledger - Agent state: {agent}]"


def state_json(state: dict[str, Any]) -> str:
    """The scoped state as the block shows it: compact JSON, sorted keys, real UTF-8."""
    return json.dumps(state, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def state_block(session: str, agent: str, state: dict[str, Any],
                room: int | None = None, cap: int | None = None) -> str:
    """The header and the scoped state; when that would take more than ``room``
    characters, the header and a line saying how to read the state instead (naming
    ``cap``, the surface's whole limit, default ``room``)."""
    shown = state_json(state)
    block = f"{state_header(agent)}\n{shown}"
    if room is not None and len(block) > room:
        whole = cap if cap is not None else room
        block = (f"{state_header(agent)} not shown: {len(shown)} characters would pass"
                 f" the {whole}-character cap; run 'ctxledger state {session} --agent"
                 f" {agent}'")
    return block


@dataclass(frozen=True)
class AgentContext:
    """A profile's assembly and, with an agent, the session state its manifest scopes."""

    session: str
    assembly: Assembly
    agent: str | None = None
    state: dict[str, Any] | None = None
    """The scoped state (with ``_agent`` and ``_savings``); None without an agent."""

    def text(self, limit: int | None = None) -> str:
        """The context text: the assembly's, then a blank line and the state block.
        ``limit`` caps the whole in characters by replacing the state block (never the
        assembly) with the line that names the ``state`` command."""
        base = self.assembly.text
        if self.agent is None or self.state is None:
            return base
        room = None if limit is None else limit - len(base) - 2
        return f"{base}\n\n{state_block(self.session, self.agent, self.state, room, limit)}"

    def to_openai(self) -> list[dict[str, Any]]:
        """The assembly's messages for OpenAI's chat API; refused with an agent."""
        self._chat_format("openai")
        return self.assembly.to_openai()

    def to_anthropic(self) -> dict[str, Any]:
        """The assembly's ``{system, messages}`` for Anthropic's API; refused with an
        agent."""
        self._chat_format("anthropic")
        return self.assembly.to_anthropic()

    def _chat_format(self, name: str) -> None:
        # A chat request carries the assembly's messages only: silently dropping the
        # agent's state would suggest the agent was served.
        if self.agent is not None:
            raise InvalidArgument(f"the {name} format carries the assembly's messages only;"
                                  " an agent's scoped state comes with the json or text"
                                  " format")

    def to_json(self) -> dict[str, Any]:
        """The Assembly's JSON; with an agent, plus ``agent``: its name, the scoped
        state and the context text."""
        data: dict[str, Any] = self.assembly.model_dump(mode="json")
        if self.agent is not None:
            data["agent"] = {"name": self.agent, "state": self.state, "text": self.text()}
        return data
