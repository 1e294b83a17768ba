"""Ends orphaned runs: their lease lapsed (or was released) and no executor took them over
within `orphan_seconds`.

A run whose lease lapses is normally claimed by another executor replica (claims.py) and
carries on. Only one left unclaimed for `orphan_seconds` past its lease's expiry (or its
release), i.e. with no executor there to take it over, is ended here. Every events replica
sweeps. An orphan is first claimed with a conditional UPDATE on its epoch, which holds it as
``lost:<owner>`` (so no late executor claims it) and bumps the epoch (so its stalled owner's
appends are refused); exactly one replica ends each run. It appends ERROR_OCCURRED (fatal,
EXECUTOR_LOST) through the log's ordinary append, which adds STREAM_END, publishes to live
subscribers and keeps seqs gap-free. A replica that dies between claim and append leaves a
claim that lapses too, and another replica finishes the job.
"""

from __future__ import annotations

import json
import logging
from datetime import datetime, timedelta

from sqlalchemy import ColumnElement, Connection, and_, bindparam, or_, select, update

from shuttle.periodic import Periodic

from .errors import FailedPrecondition
from .leases import LOST_PREFIX, ExpiredLease, LeaseStore, live
from .log import EventLog
from .models import workflows
from .records import NewEvent

log = logging.getLogger(__name__)

ERROR_TYPE = "EXECUTOR_LOST"


def _sweepable() -> ColumnElement[bool]:
    """Live and expired: a claim of the sweeper's whose hold lapsed (that replica died), or
    any other lease expired before the orphan cutoff."""
    return and_(
        live(),
        workflows.c.lease_expires_at < bindparam("b_now"),
        or_(
            workflows.c.lease_owner.startswith(LOST_PREFIX),
            workflows.c.lease_expires_at < bindparam("b_cutoff"),
        ),
    )


_ORPHANS = (
    select(
        workflows.c.id,
        workflows.c.tenant_id,
        workflows.c.lease_owner,
        workflows.c.lease_expires_at,
        workflows.c.lease_epoch,
    )
    .where(_sweepable())
    .order_by(workflows.c.lease_expires_at)
    .limit(bindparam("b_limit"))
)
_HOLD = (
    update(workflows)
    .where(
        workflows.c.id == bindparam("b_workflow_id"),
        workflows.c.lease_owner == bindparam("b_owner"),
        workflows.c.lease_epoch == bindparam("b_epoch"),
        _sweepable(),
    )
    .values(
        lease_owner=bindparam("b_lost"),
        lease_expires_at=bindparam("b_until", type_=workflows.c.lease_expires_at.type),
        lease_epoch=workflows.c.lease_epoch + 1,
    )
)


def lost_run_event(lease: ExpiredLease, orphan_seconds: float) -> NewEvent:
    """The fatal ERROR_OCCURRED that ends a run no executor took over."""
    expired = lease.expired_at.isoformat(timespec="milliseconds")
    waited = f"{orphan_seconds:g} s"
    if lease.lost_owner:
        what = (
            f"The executor running this task ({lease.lost_owner}) stopped responding: its "
            f"lease expired at {expired}"
        )
    else:
        what = f"The executor running this task handed it over at {expired}"
    message = (
        f"{what}, and no executor took the run over within {waited}, so it cannot continue. "
        "Retry the task."
    )
    payload = {
        "error_type": ERROR_TYPE,
        "error_message": message,
        "recoverable": False,
        "fatal": True,
        "lost_owner": lease.lost_owner,
        "lease_expired_at": expired,
        "orphan_seconds": orphan_seconds,
    }
    return NewEvent(
        type="ERROR_OCCURRED",
        message="Executor lost: retry the task",
        payload_json=json.dumps(payload),
    )


class LeaseSweeper:
    """Every `interval_seconds`, ends up to `batch` runs left unclaimed for `orphan_seconds`
    past their lease's expiry."""

    def __init__(
        self,
        leases: LeaseStore,
        event_log: EventLog,
        interval_seconds: float,
        *,
        orphan_seconds: float,
        batch: int = 100,
    ) -> None:
        self._leases = leases
        self._log = event_log
        self._batch = batch
        self._orphan = timedelta(seconds=orphan_seconds)
        # Long enough for one append; past it another replica may take the claim over.
        self._hold = timedelta(seconds=max(2 * interval_seconds, 10.0))
        # The first pass waits an interval too: after this service restarts, executors that
        # were cut off get to renew before their leases are judged.
        self._periodic = Periodic(
            "lease sweep", self.sweep_once, interval_seconds, first_pass_at_once=False
        )

    def start(self) -> None:
        self._periodic.start()

    async def stop(self) -> None:
        await self._periodic.stop()

    async def orphans(self) -> list[ExpiredLease]:
        """Runs to end, oldest expiry first: no executor claimed them within the orphan
        time, or a sweeper's claim of them lapsed. Workflows never leased are not among them."""
        values = self._bounds(self._leases.clock())
        async with self._leases.engine.connect() as conn:
            rows = (await conn.execute(_ORPHANS, {**values, "b_limit": self._batch})).all()
        return [ExpiredLease(str(i), str(t), str(o), e, int(n)) for i, t, o, e, n in rows]

    async def claim(self, lease: ExpiredLease) -> bool:
        """Hold an orphan for this replica to end, at the next epoch; False when it was
        renewed, claimed or ended meanwhile (by its executor or another replica)."""
        now = self._leases.clock()
        values = {
            **self._bounds(now),
            "b_workflow_id": lease.workflow_id,
            "b_owner": lease.owner,
            "b_epoch": lease.epoch,
            "b_lost": LOST_PREFIX + lease.lost_owner,
            "b_until": now + self._hold,
        }
        claimed: int = await self._leases.writes.write(_hold_one, values)
        return claimed == 1

    async def sweep_once(self) -> list[str]:
        """End the orphaned runs; the ids this replica ended."""
        ended: list[str] = []
        orphan_seconds = self._orphan.total_seconds()
        for lease in await self.orphans():
            if not await self.claim(lease):
                continue  # taken over or renewed in time, or another replica is ending it
            event = lost_run_event(lease, orphan_seconds)
            try:
                await self._log.append(lease.workflow_id, lease.tenant_id, [event])
            except FailedPrecondition:
                continue  # its own terminal event got in first
            log.warning(
                "run ended: no executor took it over",
                extra={"workflow_id": lease.workflow_id, "lost_owner": lease.lost_owner},
            )
            ended.append(lease.workflow_id)
        return ended

    def _bounds(self, now: datetime) -> dict[str, datetime]:
        return {"b_now": now, "b_cutoff": now - self._orphan}


def _hold_one(conn: Connection, values: dict[str, object]) -> int:
    return conn.execute(_HOLD, values).rowcount
