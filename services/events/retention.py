"""Retention: the SQL log keeps a workflow for N days after its last event.

A workflow is purged whole (row, events, idempotency records, full tool results), never
event by event, so whatever remains of a log is still gap-free from seq 1.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import Connection, delete, select

from shuttle.periodic import Periodic
from shuttle.sql_transactions import WriteTransactions

from .models import appends, events, tool_results, workflows
from .store import Clock, utc_now

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PurgeReport:
    cutoff: datetime
    workflows: int
    events: int


async def purge(writes: WriteTransactions, older_than: datetime) -> PurgeReport:
    """Delete every workflow whose last activity is before `older_than`, in one transaction
    (queued with the log's other writes: see SqlEventStore.write)."""
    workflows_purged, events_purged = await writes.write(_purge, older_than)
    return PurgeReport(older_than, workflows_purged, events_purged)


def _purge(conn: Connection, older_than: datetime) -> tuple[int, int]:
    stale = select(workflows.c.id).where(workflows.c.updated_at < older_than)
    # Children first, explicitly: SQLite only cascades with foreign keys switched on.
    for table in (tool_results, appends):
        conn.execute(delete(table).where(table.c.workflow_id.in_(stale)))
    purged_events = conn.execute(delete(events).where(events.c.workflow_id.in_(stale)))
    purged = conn.execute(delete(workflows).where(workflows.c.updated_at < older_than))
    return purged.rowcount or 0, purged_events.rowcount or 0


class RetentionTask:
    """Runs `purge` every `interval_seconds` for workflows idle over `retention_days`."""

    def __init__(
        self,
        writes: WriteTransactions,
        retention_days: float,
        interval_seconds: float,
        clock: Clock = utc_now,
    ) -> None:
        self._writes = writes
        self._retention = timedelta(days=retention_days)
        self._clock = clock
        self._periodic = Periodic("retention purge", self.run_once, interval_seconds)

    def start(self) -> None:
        self._periodic.start()

    async def stop(self) -> None:
        await self._periodic.stop()

    async def run_once(self) -> PurgeReport:
        report = await purge(self._writes, self._clock() - self._retention)
        if report.workflows:
            log.info(
                "purged old workflows",
                extra={"workflows": report.workflows, "events": report.events},
            )
        return report
