"""The MCP server (``ctxledger mcp``): the ledger's tools and resources for coding agents,
on the official ``mcp`` SDK (the ``mcp`` extra). ``server.py`` imports the SDK; this
package itself imports nothing, so ``import ctxledger`` never loads it."""
