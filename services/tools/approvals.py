"""Approval records in SQL: the conditional UPDATE that makes the first decision win.

Every replica of the tools service shares the table, so two operators (or two replicas)
deciding at once race on `UPDATE … WHERE status = 'pending'`: exactly one row update wins.
"""

from __future__ import annotations

import contextlib
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from services.tools.db import tool_approvals

PENDING = "pending"
APPROVED = "approved"
DENIED = "denied"
TIMEOUT = "timeout"
# The run ended (cancelled, say) while its call waited: nobody is left to act on a decision.
RUN_ENDED = "run_ended"
OPERATOR_DECISIONS = frozenset({APPROVED, DENIED})
SYSTEM_DECISIONS = frozenset({TIMEOUT, RUN_ENDED})


class ApprovalNotFoundError(LookupError):
    pass


class ApprovalAlreadyDecidedError(Exception):
    def __init__(self, approval: Approval) -> None:
        by = f" by {approval.decided_by}" if approval.decided_by else ""
        super().__init__(
            f"approval {approval.approval_id} was already decided: {approval.status}{by}"
        )
        self.approval = approval


@dataclass(frozen=True, kw_only=True)
class Approval:
    approval_id: str
    tenant_id: str
    workflow_id: str
    call_id: str
    tool_name: str
    arguments_json: str
    operation: str
    risk_level: str
    status: str
    decided_by: str
    comment: str
    requested_at: datetime
    expires_at: datetime
    decided_at: datetime | None

    @property
    def pending(self) -> bool:
        return self.status == PENDING


def _from_row(row: Any) -> Approval:
    return Approval(
        approval_id=row.id,
        tenant_id=row.tenant_id,
        workflow_id=row.workflow_id,
        call_id=row.call_id,
        tool_name=row.tool_name,
        arguments_json=row.arguments_json,
        operation=row.operation,
        risk_level=row.risk_level,
        status=row.status,
        decided_by=row.decided_by,
        comment=row.comment,
        requested_at=row.requested_at,
        expires_at=row.expires_at,
        decided_at=row.decided_at,
    )


class ApprovalStore:
    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    async def create(
        self,
        *,
        tenant_id: str,
        workflow_id: str,
        call_id: str,
        tool_name: str,
        arguments_json: str,
        operation: str,
        risk_level: str,
        timeout_seconds: float,
    ) -> Approval:
        now = datetime.now(UTC)
        approval_id = f"appr-{uuid.uuid4().hex}"
        values: dict[str, Any] = {
            "id": approval_id,
            "tenant_id": tenant_id,
            "workflow_id": workflow_id,
            "call_id": call_id,
            "tool_name": tool_name,
            "arguments_json": arguments_json,
            "operation": operation,
            "risk_level": risk_level,
            "status": PENDING,
            "decided_by": "",
            "comment": "",
            "requested_at": now,
            "expires_at": now + timedelta(seconds=timeout_seconds),
            "decided_at": None,
        }
        async with self._engine.begin() as conn:
            await conn.execute(tool_approvals.insert().values(**values))
        return await self.get(approval_id, tenant_id)

    async def get(self, approval_id: str, tenant_id: str) -> Approval:
        """The approval, if it belongs to `tenant_id`; another tenant's is not found."""
        async with self._engine.connect() as conn:
            row = (
                await conn.execute(
                    select(tool_approvals).where(
                        tool_approvals.c.id == approval_id,
                        tool_approvals.c.tenant_id == tenant_id,
                    )
                )
            ).first()
        if row is None:
            raise ApprovalNotFoundError(f"approval {approval_id!r} not found")
        return _from_row(row)

    async def decide(
        self,
        approval_id: str,
        tenant_id: str,
        status: str,
        *,
        decided_by: str = "",
        comment: str = "",
    ) -> Approval:
        """Record a decision if the approval is still pending; else raise AlreadyDecided."""
        now = datetime.now(UTC)
        conditions = [
            tool_approvals.c.id == approval_id,
            tool_approvals.c.tenant_id == tenant_id,
            tool_approvals.c.status == PENDING,
        ]
        if status not in SYSTEM_DECISIONS:
            # An operator's decision after the deadline is too late, even if no waiter is left
            # to mark the approval timed out (its replica stopped).
            conditions.append(tool_approvals.c.expires_at > now)
        async with self._engine.begin() as conn:
            result = await conn.execute(
                update(tool_approvals)
                .where(*conditions)
                .values(status=status, decided_by=decided_by, comment=comment, decided_at=now)
            )
        current = await self.get(approval_id, tenant_id)
        if result.rowcount != 1:
            if current.pending:
                # Pending but past its deadline: record the timeout so later readers agree.
                with contextlib.suppress(ApprovalAlreadyDecidedError):
                    await self.decide(approval_id, tenant_id, TIMEOUT, decided_by="system")
                current = await self.get(approval_id, tenant_id)
            raise ApprovalAlreadyDecidedError(current)
        return current

    async def list(
        self, tenant_id: str, *, workflow_id: str = "", pending_only: bool = False
    ) -> list[Approval]:
        query = select(tool_approvals).where(tool_approvals.c.tenant_id == tenant_id)
        if workflow_id:
            query = query.where(tool_approvals.c.workflow_id == workflow_id)
        if pending_only:
            query = query.where(tool_approvals.c.status == PENDING)
        query = query.order_by(tool_approvals.c.requested_at)
        async with self._engine.connect() as conn:
            rows = (await conn.execute(query)).all()
        return [_from_row(row) for row in rows]
