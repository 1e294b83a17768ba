"""Taking runs over: an executor replica claims live runs whose lease lapsed (their executor
died or stalled) or was released for hand-over (their executor is stopping).

Each candidate is claimed with one conditional UPDATE on the epoch it was read at, in a
transaction of its own: of several claimers (tasks or replicas) racing for a row, the first
to commit moves the epoch on, and the others' UPDATE then matches nothing (PostgreSQL
re-checks the condition on the row as committed; SQLite has one writer at a time). Rows the
sweeper holds (``lost:<owner>``) are not claimable: that run is being ended.
"""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import (
    ColumnElement,
    Connection,
    Integer,
    RowMapping,
    and_,
    bindparam,
    case,
    select,
    update,
)

from .errors import InvalidArgument
from .leases import LOST_PREFIX, LeaseStore, live
from .models import workflows
from .records import WorkflowRecord
from .rows import workflow_record
from .validation import check_id, check_ttl

MAX_CLAIM = 100
# Claiming stops once the runs claimed carry this many bytes of spec and query, so the
# answer stays within gRPC's 16 MiB message (a spec is at most 8 MiB).
CLAIM_ANSWER_BYTES = 6 * 1024 * 1024
# Candidates read per claimed run wanted: some go to other claimers racing for the oldest.
_CANDIDATES_PER_CLAIM = 2


def _claimable() -> ColumnElement[bool]:
    """Live, leased or released, expired, and not held by the sweeper."""
    return and_(
        live(),
        workflows.c.lease_expires_at <= bindparam("b_now"),
        ~workflows.c.lease_owner.startswith(LOST_PREFIX),
    )


# Built once, as every executor replica runs them every poll. Oldest expiry first (the
# lease expiry index), the id breaking ties so every claimer walks rows in one order.
_CANDIDATES = (
    select(workflows.c.id, workflows.c.lease_epoch)
    .where(_claimable())
    .order_by(workflows.c.lease_expires_at, workflows.c.id)
    .limit(bindparam("b_limit", type_=Integer))
)
_CLAIM = (
    update(workflows)
    .where(
        workflows.c.id == bindparam("b_workflow_id"),
        workflows.c.lease_epoch == bindparam("b_epoch"),
        _claimable(),
    )
    .values(
        lease_owner=bindparam("b_owner"),
        lease_expires_at=bindparam("b_until", type_=workflows.c.lease_expires_at.type),
        lease_epoch=workflows.c.lease_epoch + 1,
        # A released lease was handed over, not lost.
        takeovers=workflows.c.takeovers + case((workflows.c.lease_owner == "", 0), else_=1),
    )
    .returning(*workflows.c)
)


async def claim_runs(
    leases: LeaseStore, owner: str, ttl_ms: int, limit: int
) -> list[WorkflowRecord]:
    """Up to `limit` runs taken over by `owner` until now + ttl_ms, oldest expiry first,
    each at its next epoch; those another claimer got first are skipped."""
    check_id("owner", owner)
    check_ttl("ttl_ms", ttl_ms)
    if not 1 <= limit <= MAX_CLAIM:
        raise InvalidArgument(f"limit must be 1 to {MAX_CLAIM} (got {limit})")
    now = leases.clock()
    wanted = {"b_now": now, "b_limit": limit * _CANDIDATES_PER_CLAIM}
    async with leases.engine.connect() as conn:
        candidates = (await conn.execute(_CANDIDATES, wanted)).all()
    claimed: list[WorkflowRecord] = []
    size = 0
    for workflow_id, epoch in candidates:
        if len(claimed) == limit or size >= CLAIM_ANSWER_BYTES:
            break
        values = {
            "b_workflow_id": workflow_id,
            "b_epoch": epoch,
            "b_now": now,
            "b_owner": owner,
            "b_until": now + timedelta(milliseconds=ttl_ms),
        }
        row = await leases.writes.write(_claim_one, values)
        if row is None:
            continue  # another claimer, a renewal or the run's end got there first
        record = workflow_record(row)
        claimed.append(record)
        size += len(record.spec_json) + len(record.query)
    return claimed


def _claim_one(conn: Connection, values: dict[str, object]) -> RowMapping | None:
    return conn.execute(_CLAIM, values).mappings().one_or_none()
