"""Ends runs whose executor is gone: their lease lapsed before the workflow ended.

Every events replica sweeps. A lapsed lease is first claimed with a conditional UPDATE, so
exactly one replica ends each run; it appends ERROR_OCCURRED (fatal, EXECUTOR_LOST) through
the log's ordinary append, which adds STREAM_END, publishes to live subscribers and keeps
seqs gap-free. A replica that dies between claim and append leaves a claim that lapses too,
and another replica finishes the job.
"""

from __future__ import annotations

import json
import logging
from datetime import timedelta

from .errors import FailedPrecondition
from .leases import ExpiredLease, LeaseStore
from .log import EventLog
from .periodic import Periodic
from .records import NewEvent

log = logging.getLogger(__name__)

ERROR_TYPE = "EXECUTOR_LOST"


def lost_run_event(lease: ExpiredLease) -> NewEvent:
    """The fatal ERROR_OCCURRED that ends a run whose executor stopped renewing its lease."""
    expired = lease.expired_at.isoformat(timespec="milliseconds")
    message = (
        f"The executor running this task ({lease.lost_owner}) stopped responding: its lease "
        f"expired at {expired} and the run cannot continue. Retry the task."
    )
    payload = {
        "error_type": ERROR_TYPE,
        "error_message": message,
        "recoverable": False,
        "fatal": True,
        "lost_owner": lease.lost_owner,
        "lease_expired_at": expired,
    }
    return NewEvent(
        type="ERROR_OCCURRED",
        message="Executor lost: retry the task",
        payload_json=json.dumps(payload),
    )


class LeaseSweeper:
    """Every `interval_seconds`, ends up to `batch` runs whose lease lapsed."""

    def __init__(
        self,
        leases: LeaseStore,
        event_log: EventLog,
        interval_seconds: float,
        *,
        batch: int = 100,
    ) -> None:
        self._leases = leases
        self._log = event_log
        self._batch = batch
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

    async def sweep_once(self) -> list[str]:
        """End the runs whose lease lapsed; the ids this replica ended."""
        ended: list[str] = []
        for lease in await self._leases.expired(self._batch):
            if not await self._leases.claim(lease, self._hold):
                continue  # renewed in time, or another replica is ending it
            try:
                await self._log.append(lease.workflow_id, lease.tenant_id, [lost_run_event(lease)])
            except FailedPrecondition:
                continue  # its own terminal event got in first
            log.warning(
                "run ended: its executor stopped renewing the lease",
                extra={"workflow_id": lease.workflow_id, "lost_owner": lease.lost_owner},
            )
            ended.append(lease.workflow_id)
        return ended
