"""MCP servers (stdio or streamable HTTP, through the `mcp` SDK) as tool providers."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any, cast

from mcp import Client, StdioServerParameters
from mcp.types import RequestParamsMeta

from services.tools.catalog import ToolError, ToolOutput, ToolSpec
from services.tools.context import current_call
from shuttle.settings import McpServerConfig

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_SECONDS = 30.0
# The `_meta` key of `tools/call` that carries the call's idempotency key (docs/tools.md).
IDEMPOTENCY_META_KEY = "io.shuttle/idempotency-key"


def _text_of(content: list[Any]) -> str:
    parts = []
    for block in content:
        text = getattr(block, "text", None)
        if isinstance(text, str):
            parts.append(text)
        else:
            kind = getattr(block, "type", type(block).__name__)
            parts.append(f"[{kind} content omitted]")
    return "\n".join(parts)


class McpTool:
    def __init__(self, spec: ToolSpec, server: McpProvider) -> None:
        self._spec = spec
        self._server = server

    @property
    def spec(self) -> ToolSpec:
        return self._spec

    async def run(self, args: dict[str, Any]) -> ToolOutput:
        return await self._server.call(self._spec.name, args, current_call().idempotency_key)


class McpProvider:
    """One MCP server, connected for the life of the service.

    The SDK's client is an anyio context manager that must be entered and left in the same
    task, so one owner task holds it open; calls from any task use its session.
    """

    def __init__(self, name: str, config: McpServerConfig) -> None:
        self.name = name
        self._config = config
        self._client: Client | None = None
        self._ready = asyncio.Event()
        self._stop = asyncio.Event()
        self._owner: asyncio.Task[None] | None = None
        self._error: BaseException | None = None

    def _target(self) -> StdioServerParameters | str:
        if self._config.url:
            return self._config.url
        return StdioServerParameters(
            command=self._config.command, args=list(self._config.args), env=dict(self._config.env)
        )

    async def _own(self) -> None:
        try:
            async with Client(self._target()) as client:
                self._client = client
                self._ready.set()
                await self._stop.wait()
        except BaseException as exc:
            self._error = exc
            raise
        finally:
            self._client = None
            self._ready.set()

    async def connect(self) -> None:
        self._ready, self._stop, self._error = asyncio.Event(), asyncio.Event(), None
        self._owner = asyncio.create_task(self._own(), name=f"mcp-{self.name}")
        async with asyncio.timeout(CONNECT_TIMEOUT_SECONDS):
            await self._ready.wait()
        if self._client is None:
            raise ConnectionError(f"MCP server {self.name!r} did not start: {self._error!r}")

    async def list_tools(self) -> list[McpTool]:
        client = self._require()
        listing = await client.list_tools()
        tools = []
        for tool in listing.tools:
            annotations = tool.annotations
            try:
                spec = ToolSpec(
                    name=tool.name,
                    description=tool.description or tool.title or tool.name,
                    parameters=dict(tool.input_schema or {"type": "object"}),
                    category=f"mcp:{self.name}",
                    read_only=bool(annotations and annotations.read_only_hint),
                )
            except ValueError as exc:
                log.error("skipping an MCP tool", extra={"provider": self.name, "error": str(exc)})
                continue
            tools.append(McpTool(spec, self))
        return tools

    def _require(self) -> Client:
        if self._client is None:
            raise ToolError(f"the MCP server {self.name!r} is not connected")
        return self._client

    async def call(self, name: str, args: dict[str, Any], idempotency_key: str = "") -> ToolOutput:
        # An open map in the SDK (extra keys allowed), which mypy cannot tell.
        meta = cast(RequestParamsMeta, {IDEMPOTENCY_META_KEY: idempotency_key})
        result = await self._require().call_tool(name, args, meta=meta if idempotency_key else None)
        text = _text_of(list(result.content))
        if not text and result.structured_content is not None:
            text = json.dumps(result.structured_content, ensure_ascii=False)
        if result.is_error:
            raise ToolError(text or f"{name} failed on the MCP server {self.name!r}")
        return ToolOutput(text=text)

    async def close(self) -> None:
        self._stop.set()
        if self._owner is not None:
            try:
                await self._owner
            except Exception as exc:
                log.warning("MCP server closed with an error", exc_info=exc)
