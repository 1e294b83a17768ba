"""Audit log: one SQL row per tool call, blocked calls included."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy.ext.asyncio import AsyncEngine

from services.tools.db import tool_audit
from services.tools.hooks.base import CallRecord, Hook, HookContext, PostResult

# The record keeps the whole output, up to a bound that keeps one row reasonable.
MAX_RECORDED_CHARS = 1_000_000


@dataclass(kw_only=True)
class AuditHook(Hook):
    engine: AsyncEngine
    name: str = "audit"
    # Advisory: losing an audit row must not take the tool away from the agent; the failure
    # is logged by the chain. Deployments that must not run unaudited calls set it closed.
    fail_closed: bool = False
    # Last, so the row holds the observation every other hook produced.
    priority: int = 1000
    observe_blocked: bool = True

    async def post(self, ctx: HookContext, record: CallRecord) -> PostResult | None:
        async with self.engine.begin() as conn:
            await conn.execute(
                tool_audit.insert().values(
                    created_at=datetime.now(UTC),
                    tenant_id=ctx.tenant_id,
                    workflow_id=ctx.workflow_id,
                    call_id=ctx.call_id,
                    agent_id=ctx.agent_id,
                    tool_name=ctx.tool.name,
                    arguments_json=json.dumps(ctx.arguments, ensure_ascii=False),
                    outcome=record.outcome,
                    error=record.error,
                    blocked_by=record.blocked_by,
                    block_reason=record.block_reason,
                    result=(record.full_output or record.observation)[:MAX_RECORDED_CHARS],
                    duration_ms=record.duration_ms,
                )
            )
        return None
