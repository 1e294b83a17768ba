"""Run leases on the workflow row: which executor replica runs a workflow, at which epoch, and
until when.

An executor renews its run's lease while the run is alive. Every claim of a lease bumps the
row's ``lease_epoch`` (0: never leased); appends carrying an older epoch are refused (see
append_tx.py), so an owner whose run was taken over cannot write into it. A lease that lapses,
or is released for hand-over, is claimed by another executor (`ClaimRuns`, claims.py); one that
nobody claims for the orphan time is ended by `LeaseSweeper`. Every change is one conditional
UPDATE, so replicas racing on the same row never both win.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Connection,
    RowMapping,
    Update,
    and_,
    bindparam,
    case,
    or_,
    update,
)
from sqlalchemy.ext.asyncio import AsyncEngine

from shuttle.sql_transactions import EngineWrites, WriteTransactions

from .append_tx import workflow_row
from .errors import FailedPrecondition, InvalidArgument
from .models import WORKFLOW_ROW, workflows
from .records import TERMINAL_STATUSES, WorkflowRecord
from .rows import workflow_record
from .store import Clock, utc_now
from .validation import MAX_TTL_MS, check_epoch, check_id, check_ttl

__all__ = ["LOST_PREFIX", "MAX_TTL_MS", "ExpiredLease", "LeaseStore", "live"]

# A claimed lease is held as "lost:<owner>" while the sweeper ends the run; the prefix keeps
# the lost owner's name for the message, even when a claim has to be taken over.
LOST_PREFIX = "lost:"


def live() -> ColumnElement[bool]:
    """The workflow has not ended."""
    return and_(
        workflows.c.status.not_in([s.value for s in TERMINAL_STATUSES]),
        workflows.c.stream_ended.is_(False),
    )


def _target() -> ColumnElement[bool]:
    return and_(
        workflows.c.id == bindparam("b_workflow_id"),
        workflows.c.tenant_id == bindparam("b_tenant_id"),
        live(),
    )


_UNTIL = bindparam("b_until", type_=workflows.c.lease_expires_at.type)

# Built once: composing the statement took more of a renewal's CPU than running it.
# Without an epoch: free, lapsed or already the caller's; a new owner is a new epoch.
_TAKE = (
    update(workflows)
    .where(
        _target(),
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
        lease_expires_at=_UNTIL,
        lease_epoch=case(
            (workflows.c.lease_owner == bindparam("b_owner"), workflows.c.lease_epoch),
            else_=workflows.c.lease_epoch + 1,
        ),
    )
    .returning(*WORKFLOW_ROW)
)
# With an epoch: only while that owner and epoch hold it, lapsed or not.
_EXTEND = (
    update(workflows)
    .where(
        _target(),
        workflows.c.lease_owner == bindparam("b_owner"),
        workflows.c.lease_epoch == bindparam("b_epoch"),
    )
    .values(lease_expires_at=_UNTIL)
    .returning(*WORKFLOW_ROW)
)
# Hand-over: no owner, expired now; repeated (already released at this epoch) it changes
# nothing, so a retried release is answered alike.
_RELEASE = (
    update(workflows)
    .where(
        _target(),
        workflows.c.lease_epoch == bindparam("b_epoch"),
        or_(
            workflows.c.lease_owner == bindparam("b_owner"),
            and_(workflows.c.lease_owner == "", workflows.c.lease_expires_at.is_not(None)),
        ),
    )
    .values(
        lease_owner="",
        lease_expires_at=case(
            (workflows.c.lease_owner == "", workflows.c.lease_expires_at),
            else_=bindparam("b_now", type_=workflows.c.lease_expires_at.type),
        ),
    )
    .returning(*WORKFLOW_ROW)
)


class LeaseStore:
    def __init__(
        self,
        engine: AsyncEngine,
        *,
        clock: Clock = utc_now,
        writes: WriteTransactions | None = None,
    ) -> None:
        self.engine = engine
        self.clock = clock
        # The event store's, on SQLite, whose writers would otherwise collide.
        self.writes = writes or EngineWrites(engine)

    async def renew(
        self, workflow_id: str, tenant_id: str, owner: str, ttl_ms: int, epoch: int = 0
    ) -> WorkflowRecord:
        """Extend `owner`'s lease to now + ttl_ms. With an `epoch` (> 0): only while `owner`
        holds the lease at that epoch. Without: when the lease is free, lapsed or already
        `owner`'s, a new owner taking the next epoch. FailedPrecondition when another owner
        or epoch holds it or the workflow ended; NotFound when it is not this tenant's."""
        check_id("workflow_id", workflow_id)
        check_id("tenant_id", tenant_id)
        check_id("owner", owner)
        check_ttl("ttl_ms", ttl_ms)
        check_epoch("epoch", epoch)
        now = self.clock()
        values = {  # b_: bind names may not be column names in an UPDATE
            "b_workflow_id": workflow_id,
            "b_tenant_id": tenant_id,
            "b_owner": owner,
            "b_now": now,
            "b_until": now + timedelta(milliseconds=ttl_ms),
            "b_epoch": epoch,
        }
        statement = _EXTEND if epoch else _TAKE
        return await self._conditional(statement, values, owner, epoch)

    async def release(
        self, workflow_id: str, tenant_id: str, owner: str, epoch: int
    ) -> WorkflowRecord:
        """Hand the run over at once: no owner, expired now, the epoch kept until someone
        claims it. Granted while `owner` holds the lease at `epoch` (or it is already
        released at that epoch); else FailedPrecondition."""
        check_id("workflow_id", workflow_id)
        check_id("tenant_id", tenant_id)
        check_id("owner", owner)
        check_epoch("epoch", epoch)
        if not epoch:
            raise InvalidArgument("epoch is required: release the lease at the epoch you hold")
        values = {
            "b_workflow_id": workflow_id,
            "b_tenant_id": tenant_id,
            "b_owner": owner,
            "b_now": self.clock(),
            "b_epoch": epoch,
        }
        return await self._conditional(_RELEASE, values, owner, epoch)

    async def _conditional(
        self, statement: Update, values: dict[str, Any], owner: str, epoch: int
    ) -> WorkflowRecord:
        workflow_id, tenant_id = values["b_workflow_id"], values["b_tenant_id"]

        def attempt(conn: Connection) -> tuple[bool, RowMapping]:
            granted = conn.execute(statement, values).mappings().one_or_none()
            if granted is not None:
                return True, granted
            return False, workflow_row(conn, workflow_id, tenant_id)

        granted, row = await self.writes.write(attempt)
        if not granted:
            raise _refusal(workflow_record(row), owner, epoch)
        return workflow_record(row)


@dataclass(frozen=True)
class ExpiredLease:
    """A lapsed (or released) lease of a live run, as the sweeper found it."""

    workflow_id: str
    tenant_id: str
    owner: str
    expired_at: datetime
    epoch: int = 0

    @property
    def lost_owner(self) -> str:
        """The executor that stopped renewing (a claim's original owner); "" when the run
        was released for hand-over."""
        return self.owner.removeprefix(LOST_PREFIX)


def _refusal(record: WorkflowRecord, owner: str, epoch: int) -> FailedPrecondition:
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
    if epoch and record.lease_epoch != epoch:
        return FailedPrecondition(
            f"the lease of workflow {record.workflow_id!r} is at epoch {record.lease_epoch} "
            f"(owner {holder or 'none'!r}), not at epoch {epoch} of {owner!r}: the run was "
            "taken over; stop it"
        )
    if not holder:
        return FailedPrecondition(
            f"the lease of workflow {record.workflow_id!r} was released (epoch "
            f"{record.lease_epoch}) and is {owner!r}'s no more: stop the run"
        )
    until = record.lease_expires_at.isoformat() if record.lease_expires_at else "?"
    return FailedPrecondition(
        f"workflow {record.workflow_id!r} is leased to {holder!r} until {until}, not to {owner!r}"
    )
