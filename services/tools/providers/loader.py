"""Connects the configured providers and adds their tools to the registry.

A provider that is down at start-up is retried in the background, so the tools service
starts (and serves its built-ins) whatever state its providers are in.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

from services.tools.catalog import DuplicateToolError, Tool, ToolRegistry
from services.tools.providers.mcp import McpProvider
from services.tools.providers.remote import GrpcProvider
from shuttle.settings import Settings

log = logging.getLogger(__name__)

RETRY_SECONDS = 5.0


class Provider(Protocol):
    name: str

    async def list_tools(self) -> Sequence[Tool]: ...

    async def close(self) -> None: ...


class ProviderSet:
    def __init__(self, registry: ToolRegistry) -> None:
        self._registry = registry
        self._providers: list[Provider] = []
        self._retries: list[asyncio.Task[None]] = []

    async def add(self, provider: Provider, connect: Callable[[], Awaitable[None]] | None) -> bool:
        """Connect and list; on failure keep retrying in the background. True if loaded now."""
        self._providers.append(provider)
        if await self._try(provider, connect):
            return True
        self._retries.append(asyncio.create_task(self._retry(provider, connect)))
        return False

    async def _try(self, provider: Provider, connect: Callable[[], Awaitable[None]] | None) -> bool:
        try:
            if connect is not None:
                await connect()
            tools = await provider.list_tools()
        except Exception as exc:
            log.warning(
                "tool provider unavailable; will retry",
                extra={"provider": provider.name, "error": f"{type(exc).__name__}: {exc}"},
            )
            return False
        for tool in tools:
            try:
                self._registry.register(tool)
            except DuplicateToolError as exc:
                log.error(
                    "provider tool skipped", extra={"provider": provider.name, "error": str(exc)}
                )
        log.info("tool provider loaded", extra={"provider": provider.name, "tools": len(tools)})
        return True

    async def _retry(
        self, provider: Provider, connect: Callable[[], Awaitable[None]] | None
    ) -> None:
        while True:
            await asyncio.sleep(RETRY_SECONDS)
            if await self._try(provider, connect):
                return

    async def close(self) -> None:
        for task in self._retries:
            task.cancel()
        for provider in self._providers:
            try:
                await provider.close()
            except Exception as exc:
                log.warning("closing a provider failed", exc_info=exc)


async def load_providers(settings: Settings, registry: ToolRegistry) -> ProviderSet:
    providers = ProviderSet(registry)
    for name, target in settings.tool_providers.items():
        await providers.add(GrpcProvider(name, target, settings.tool_timeout_seconds), None)
    for name, config in settings.mcp_servers.items():
        mcp = McpProvider(name, config)
        await providers.add(mcp, mcp.connect)
    return providers
