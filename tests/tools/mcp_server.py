"""A tiny MCP server for the tests: stdio by default, streamable HTTP with `--http PORT`."""

from __future__ import annotations

import sys
from collections import Counter

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

app = MCPServer("shuttle-test")
# Calls of mcp_keyed per idempotency key, for as long as this server runs.
calls_per_key: Counter[str] = Counter()


@app.tool()
def mcp_add(a: int, b: int) -> str:
    """Add two integers."""
    return str(a + b)


@app.tool()
def mcp_fail(reason: str) -> str:
    """Always fails, with a message meant for the model."""
    raise ToolError(f"mcp_fail: {reason}")


@app.tool()
def mcp_keyed(note: str, ctx: Context) -> str:
    """Names the idempotency key of the call (`_meta`) and how often that key came."""
    meta = ctx.request_context.meta or {}
    key = str(meta.get("io.shuttle/idempotency-key", ""))
    calls_per_key[key] += 1
    return f"{note}: key {key!r} call #{calls_per_key[key]}"


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--http":
        app.run(transport="streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        app.run()
