"""A run's tool catalog, listed while its workflow is being created.

ListTools and CreateWorkflow do not depend on each other, so a run asks for both at once
instead of one after the other, and its first model call waits for neither in turn.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from services.executor.ports import ToolDefinition, ToolHost, ToolInvocation, ToolOutcome

# How long a run's opening events wait for its catalog: a listing takes milliseconds, and a
# tools service that hangs must not keep a run from showing it has started.
SETTLE_MAX_SECONDS = 1.0


class PrefetchedCatalog:
    """A ToolHost for one run whose first listing for the run's tenant is the one started
    with the run; any later listing (a DAG step's, say) asks the tool host afresh."""

    def __init__(self, tools: ToolHost, tenant_id: str) -> None:
        self._tools = tools
        self._tenant_id = tenant_id
        self._listing: asyncio.Task[Sequence[ToolDefinition]] | None = asyncio.create_task(
            _listed(tools, tenant_id), name="list-tools"
        )
        # Retrieved here too, so a run that ends before it lists its tools leaves no
        # "exception was never retrieved" behind.
        self._listing.add_done_callback(_retrieve)

    async def settled(self) -> None:
        """Wait until the listing has answered, whatever the answer (it is raised, if an
        error, to whoever lists the tools), for up to SETTLE_MAX_SECONDS: the run's opening
        events then go in one Append rather than WORKFLOW_STARTED alone while the agent waits
        for its catalog."""
        if self._listing is not None:
            await asyncio.wait({self._listing}, timeout=SETTLE_MAX_SECONDS)

    async def list_tools(self, tenant_id: str) -> Sequence[ToolDefinition]:
        listing, self._listing = self._listing, None
        if listing is None or tenant_id != self._tenant_id:
            if listing is not None:
                listing.cancel()
            return await self._tools.list_tools(tenant_id)
        return await listing

    async def execute(self, call: ToolInvocation) -> ToolOutcome:
        return await self._tools.execute(call)

    async def close(self) -> None:
        """Stop a listing nobody took (the run ended before its agent started)."""
        listing, self._listing = self._listing, None
        if listing is not None:
            listing.cancel()
            await asyncio.gather(listing, return_exceptions=True)


async def _listed(tools: ToolHost, tenant_id: str) -> Sequence[ToolDefinition]:
    return await tools.list_tools(tenant_id)


def _retrieve(task: asyncio.Task[Sequence[ToolDefinition]]) -> None:
    if not task.cancelled():
        task.exception()
