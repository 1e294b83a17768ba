"""How many runs a tenant may have at once, counted in the transaction that registers a new
workflow, so creates racing on several replicas cannot pass the limit together."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, Integer, bindparam, func, insert, literal, select

from .errors import ResourceExhausted
from .models import workflows
from .records import WorkflowStatus

ACTIVE_STATUSES = (WorkflowStatus.PENDING, WorkflowStatus.RUNNING, WorkflowStatus.PAUSED)
# The first key of the two-key advisory locks that serialise one tenant's creates on
# PostgreSQL (two-key locks never meet the one-key locks migrations take).
_LOCK_SPACE = 0x5E7E

# Built once, as every create runs them. At most limit + 1 rows are counted, on the
# (tenant_id, status) index, however many runs the tenant has.
_LOCK = select(
    func.pg_advisory_xact_lock(literal(_LOCK_SPACE, Integer), func.hashtext(bindparam("b_tenant")))
)
_INSERT = insert(workflows)
_ACTIVE = select(func.count()).select_from(
    select(literal(1))
    .where(
        workflows.c.tenant_id == bindparam("b_tenant"),
        workflows.c.status.in_([status.value for status in ACTIVE_STATUSES]),
        workflows.c.stream_ended.is_(False),
    )
    .limit(bindparam("b_limit", type_=Integer))
    .subquery()
)


def insert_workflow(conn: Connection, row: dict[str, Any], max_runs: int) -> None:
    """Insert the workflow's row, unless its tenant already has `max_runs` active (pending,
    running or paused) workflows: then ResourceExhausted, and the insert is rolled back with
    the transaction. 0 means no limit.

    The row goes in before the count: a repeated id fails as taken, never as over the
    limit. On PostgreSQL a per-tenant lock held to the commit serialises the tenant's
    creates; on SQLite the insert takes the database's write lock, which does the same."""
    tenant = row["tenant_id"]
    if max_runs and conn.dialect.name == "postgresql":
        conn.execute(_LOCK, {"b_tenant": tenant})
    conn.execute(_INSERT, row)
    if not max_runs:
        return
    active = conn.execute(_ACTIVE, {"b_tenant": tenant, "b_limit": max_runs + 1}).scalar_one()
    if active > max_runs:
        raise ResourceExhausted(
            f"tenant {tenant} already has {max_runs} active runs "
            f"(SHUTTLE_TENANT_MAX_RUNS={max_runs}); wait for one to end"
        )
