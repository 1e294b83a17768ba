"""Forgetting workflows: what the tool host keeps for them (workspaces, audit, approvals,
the call ledger).

The tools service is the only one touching its files and tables, so whoever deletes a
workflow elsewhere (a session's owner) asks this service to delete its part.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection
from dataclasses import dataclass

from sqlalchemy import delete
from sqlalchemy.ext.asyncio import AsyncEngine

from services.tools.db import tool_approvals, tool_audit
from services.tools.hooks.chain import HookChain
from services.tools.ledger import CallLedger
from services.tools.workspace import Workspaces


@dataclass(frozen=True)
class Forgotten:
    workspaces: int
    records: int


class WorkflowDataCleaner:
    def __init__(
        self,
        workspaces: Workspaces | None,
        engine: AsyncEngine | None,
        hooks: HookChain | None = None,
        ledger: CallLedger | None = None,
    ) -> None:
        self._workspaces = workspaces
        self._engine = engine
        self._hooks = hooks
        self._ledger = ledger

    async def forget(self, tenant_id: str, workflow_ids: Collection[str]) -> Forgotten:
        """Delete the tenant's workspaces, audit records, approvals and ledger rows of these
        workflows; rows and directories are keyed by tenant, so another tenant's are never
        reached."""
        records = 0
        if self._hooks is not None:
            # Audit rows still queued would otherwise land after the delete.
            await self._hooks.drain()
        if self._engine is not None and workflow_ids:
            async with self._engine.begin() as conn:
                for table in (tool_audit, tool_approvals):
                    result = await conn.execute(
                        delete(table).where(
                            table.c.tenant_id == tenant_id,
                            table.c.workflow_id.in_(list(workflow_ids)),
                        )
                    )
                    records += result.rowcount or 0
        if self._ledger is not None and workflow_ids:
            records += await self._ledger.forget(tenant_id, workflow_ids)
        removed = 0
        if self._workspaces is not None:
            workspaces = self._workspaces
            for workflow_id in workflow_ids:
                # rmtree blocks; keep the event loop serving other calls meanwhile.
                if await asyncio.to_thread(workspaces.remove, tenant_id, workflow_id):
                    removed += 1
        return Forgotten(workspaces=removed, records=records)
