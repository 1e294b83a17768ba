"""Audit log: one SQL row per tool call, blocked calls included.

An advisory audit hook (the default) only queues the row: the tool result goes back to the
agent without waiting for a commit, and a single writer task, started by the first queued
row and lingering briefly, inserts whatever has queued up meanwhile in one transaction.
`drain` waits until every queued row is written (the service drains before it stops, and
before it forgets a workflow's rows). A fail-closed audit hook writes each row before the
result is returned, so that a failed write can withhold it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection

from services.tools.db import tool_audit
from services.tools.hooks.base import CallRecord, Hook, HookContext, PostResult
from shuttle.sql_transactions import WriteTransactions
from shuttle.utf8 import json_text

log = logging.getLogger(__name__)

# The record keeps the whole output, up to a bound that keeps one row reasonable.
MAX_RECORDED_CHARS = 1_000_000
# Rows per INSERT; and how many may wait before a call waits for the writer (memory bound).
WRITE_BATCH_ROWS = 500
MAX_QUEUED_ROWS = 5_000
# The writer waits this long after the first queued row, so the rows of calls made one after
# another share a transaction: a commit per row cost more CPU than the tool calls themselves.
LINGER_SECONDS = 0.05


@dataclass(kw_only=True)
class AuditHook(Hook):
    # On a SQLite file, a writer thread: a transaction through aiosqlite is several round
    # trips through the event loop, which made the audit row half the service's CPU per call.
    writes: WriteTransactions
    name: str = "audit"
    # Advisory: losing an audit row must not take the tool away from the agent; the failure
    # is logged. Deployments that must not run unaudited calls set it closed.
    fail_closed: bool = False
    # Last, so the row holds the observation every other hook produced.
    priority: int = 1000
    observe_blocked: bool = True
    linger_seconds: float = LINGER_SECONDS
    _queued: list[dict[str, Any]] = field(default_factory=list, init=False, repr=False)
    _writer: asyncio.Task[None] | None = field(default=None, init=False, repr=False)
    _flush: asyncio.Event = field(default_factory=asyncio.Event, init=False, repr=False)

    async def post(self, ctx: HookContext, record: CallRecord) -> PostResult | None:
        row = _row(ctx, record)
        if self.fail_closed:
            await self._insert([row])
            return None
        self._queued.append(row)
        if self._writer is None:
            self._writer = asyncio.create_task(self._write_queued(), name="audit-writer")
        if len(self._queued) >= MAX_QUEUED_ROWS:
            await self.drain()
        return None

    async def drain(self) -> None:
        """Wait until every row queued so far is written (or its failure logged)."""
        while self._writer is not None:
            self._flush.set()  # no lingering: someone waits
            # Shielded: a caller cancelled while draining must not cancel the writing.
            await asyncio.shield(self._writer)

    async def _write_queued(self) -> None:
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._flush.wait(), self.linger_seconds)
            while self._queued:
                rows = self._queued[:WRITE_BATCH_ROWS]
                del self._queued[:WRITE_BATCH_ROWS]
                try:
                    await self._insert(rows)
                except Exception:
                    log.exception("audit rows could not be written", extra={"rows": len(rows)})
        finally:
            if self._writer is asyncio.current_task():
                self._writer = None
                self._flush.clear()

    async def _insert(self, rows: list[dict[str, Any]]) -> None:
        await self.writes.write(_insert_rows, rows)


def _insert_rows(conn: Connection, rows: list[dict[str, Any]]) -> None:
    conn.execute(tool_audit.insert(), rows)


def _row(ctx: HookContext, record: CallRecord) -> dict[str, Any]:
    return {
        "created_at": datetime.now(UTC),
        "tenant_id": ctx.tenant_id,
        "workflow_id": ctx.workflow_id,
        "call_id": ctx.call_id,
        "agent_id": ctx.agent_id,
        "tool_name": ctx.tool.name,
        # Rows go in batches, so every value must be one the database takes: the arguments
        # keep a lone surrogate escaped; the free-text columns are StoredText.
        "arguments_json": json_text(ctx.arguments),
        "outcome": record.outcome,
        "error": record.error,
        "blocked_by": record.blocked_by,
        "block_reason": record.block_reason,
        "result": (record.full_output or record.observation)[:MAX_RECORDED_CHARS],
        "duration_ms": record.duration_ms,
    }
