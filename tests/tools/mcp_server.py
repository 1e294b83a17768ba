"""A tiny MCP server for the tests: stdio by default, streamable HTTP with `--http PORT`."""

from __future__ import annotations

import sys

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

app = MCPServer("shuttle-test")


@app.tool()
def mcp_add(a: int, b: int) -> str:
    """Add two integers."""
    return str(a + b)


@app.tool()
def mcp_fail(reason: str) -> str:
    """Always fails, with a message meant for the model."""
    raise ToolError(f"mcp_fail: {reason}")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--http":
        app.run(transport="streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        app.run()
