"""The one rule for an MCP tool's server: ``mcp__<server>__<tool>`` names its server.

The session profile ranks tools by their server with it, and the hook (which must not
import the assembler on a tool use) names a tool use's server with it. Standard library
only.
"""

from __future__ import annotations

import re

MCP_SERVER_PATTERN = r"^mcp__([^_]+(?:_[^_]+)*)__"
"""The SPEC's pattern: group 1 is the server of an MCP tool's name."""

_MCP_SERVER = re.compile(MCP_SERVER_PATTERN)


def mcp_server(tool_name: str) -> str | None:
    """The MCP server of ``mcp__<server>__<tool>`` (None for any other name)."""
    match = _MCP_SERVER.match(tool_name)
    return match.group(1) if match else None
