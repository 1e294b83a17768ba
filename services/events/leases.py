"""Run leases on the workflow row: which executor replica runs a workflow, and until when.

An executor renews its run's lease while the run is alive. A lease that lapses before the
workflow ends means its executor is gone; `LeaseSweeper` then ends the workflow. Every change
is one conditional UPDATE, so replicas racing on the same row never both win.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import (
    ColumnElement,
    Connection,
    RowMapping,
    Update,
    and_,
    bindparam,
    or_,
    select,
    update,
)
from sqlalchemy.ext.asyncio import AsyncEngine

from shuttle.sql_transactions import EngineWrites, WriteTransactions

from .append_tx import workflow_row
from .errors import FailedPrecondition, InvalidArgument
from .models import workflows
from .records import TERMINAL_STATUSES, WorkflowRecord
from .rows import workflow_record
from .store import Clock, utc_now
from .validation import check_id

MAX_TTL_MS = 3_600_000
# A claimed lease is held as "lost:<owner>" while the sweeper ends the run; the prefix keeps
# the lost owner's name for the message, even when a claim has to be taken over.
LOST_PREFIX = "lost:"


@dataclass(frozen=True)
class ExpiredLease:
    workflow_id: str
    tenant_id: str
    owner: str
    expired_at: datetime

    @property
    def lost_owner(self) -> str:
        """The executor that stopped renewing (a claim's original owner)."""
        return self.owner.removeprefix(LOST_PREFIX)


def _live() -> ColumnElement[bool]:
    """The workflow has not ended."""
    return and_(
        workflows.c.status.not_in([s.value for s in TERMINAL_STATUSES]),
        workflows.c.stream_ended.is_(False),
    )


# Built once: composing the statement took more of a renewal's CPU than running it.
_TAKE = (
    update(workflows)
    .where(
        workflows.c.id == bindparam("b_workflow_id"),
        workflows.c.tenant_id == bindparam("b_tenant_id"),
        _live(),
        or_(
            workflows.c.lease_owner == "",
            workflows.c.lease_owner == bindparam("b_owner"),
            workflows.c.lease_expires_at.is_(None),
            and_(
                workflows.c.lease_expires_at <= bindparam("b_now"),
                ~workflows.c.lease_owner.startswith(LOST_PREFIX),
            ),
        ),
    )
    .values(
        lease_owner=bindparam("b_owner"),
        lease_expires_at=bindparam("b_until", type_=workflows.c.lease_expires_at.type),
    )
    .returning(*workflows.c)
)


class LeaseStore:
    def __init__(
        self,
        engine: AsyncEngine,
        *,
        clock: Clock = utc_now,
        writes: WriteTransactions | None = None,
    ) -> None:
        self._engine = engine
        self._clock = clock
        # The event store's, on SQLite, whose writers would otherwise collide.
        self._writes = writes or EngineWrites(engine)

    async def renew(
        self, workflow_id: str, tenant_id: str, owner: str, ttl_ms: int
    ) -> WorkflowRecord:
        """Give `owner` the lease until now + ttl_ms when it is free, expired or already
        `owner`'s. FailedPrecondition when another owner holds it or the workflow ended;
        NotFound when the workflow is not this tenant's."""
        check_id("workflow_id", workflow_id)
        check_id("tenant_id", tenant_id)
        check_id("owner", owner)
        if not 1 <= ttl_ms <= MAX_TTL_MS:
            raise InvalidArgument(f"ttl_ms must be 1 to {MAX_TTL_MS} (got {ttl_ms})")
        now = self._clock()
        values = {  # b_: bind names may not be column names in an UPDATE
            "b_workflow_id": workflow_id,
            "b_tenant_id": tenant_id,
            "b_owner": owner,
            "b_now": now,
            "b_until": now + timedelta(milliseconds=ttl_ms),
        }

        def renewal(conn: Connection) -> tuple[bool, RowMapping]:
            granted = conn.execute(_TAKE, values).mappings().one_or_none()
            if granted is not None:
                return True, granted
            return False, workflow_row(conn, workflow_id, tenant_id)

        granted, row = await self._writes.write(renewal)
        if not granted:
            raise _refusal(workflow_record(row), owner)
        return workflow_record(row)

    async def expired(self, limit: int = 100) -> list[ExpiredLease]:
        """Leases of workflows still running that lapsed, oldest first. Workflows never
        leased are not among them."""
        query = (
            select(
                workflows.c.id,
                workflows.c.tenant_id,
                workflows.c.lease_owner,
                workflows.c.lease_expires_at,
            )
            .where(
                workflows.c.lease_owner != "",
                workflows.c.lease_expires_at < self._clock(),
                _live(),
            )
            .order_by(workflows.c.lease_expires_at)
            .limit(limit)
        )
        async with self._engine.connect() as conn:
            rows = (await conn.execute(query)).all()
        return [ExpiredLease(str(i), str(t), str(o), e) for i, t, o, e in rows]

    async def claim(self, lease: ExpiredLease, hold: timedelta) -> bool:
        """Take a lapsed lease for the sweeper for `hold`; False when it was renewed or
        claimed meanwhile (by its executor or another replica)."""
        now = self._clock()
        claim = (
            update(workflows)
            .where(
                workflows.c.id == lease.workflow_id,
                workflows.c.lease_owner == lease.owner,
                workflows.c.lease_expires_at < now,
                _live(),
            )
            .values(lease_owner=LOST_PREFIX + lease.lost_owner, lease_expires_at=now + hold)
        )
        claimed: int = await self._writes.write(_rows_changed, claim)
        return claimed == 1


def _refusal(record: WorkflowRecord, owner: str) -> FailedPrecondition:
    if record.status.is_terminal or record.stream_ended:
        return FailedPrecondition(
            f"workflow {record.workflow_id!r} has ended ({record.status.value}); "
            "its lease can no longer be renewed: stop the run"
        )
    holder = record.lease_owner
    if holder.startswith(LOST_PREFIX):
        return FailedPrecondition(
            f"the lease of workflow {record.workflow_id!r} lapsed "
            f"(owner {holder.removeprefix(LOST_PREFIX)!r}) and the run is being ended as "
            "EXECUTOR_LOST: stop the run"
        )
    until = record.lease_expires_at.isoformat() if record.lease_expires_at else "?"
    return FailedPrecondition(
        f"workflow {record.workflow_id!r} is leased to {holder!r} until {until}, not to {owner!r}"
    )


def _rows_changed(conn: Connection, statement: Update) -> int:
    return conn.execute(statement).rowcount
