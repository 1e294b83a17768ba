"""The run lease, from the executor's side: held for as long as a run lives.

The events service fails a run whose lease lapses (its executor is presumed dead), so a live
run renews every third of the lease. A refused renewal means the run was ended without us
(the lease lapsed, e.g. after a long stall): the run is cancelled at once, appending nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from services.executor.ports import LeaseRefused, RunLeases

log = logging.getLogger(__name__)

# After a failed renewal (events service briefly away) try again this soon, bounded by the
# normal renewal interval: the lease must be renewed before it lapses.
RETRY_SECONDS = 0.5


def replica_id() -> str:
    """This executor process as a lease owner: host (the pod's name on Kubernetes), pid, and
    a random part, since a restarted container reuses both."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"[:128]


@dataclass(frozen=True)
class Leasing:
    """How this executor leases its runs: the events service port, its name, the lease."""

    leases: RunLeases
    owner: str
    ttl_seconds: float

    def keeper(self, workflow_id: str, tenant_id: str, ending: Callable[[], bool]) -> LeaseKeeper:
        return LeaseKeeper(self, workflow_id, tenant_id, ending)


class LeaseKeeper:
    """Renews one run's lease in the background; `lost` says why it was refused, if it was.

    `ending` tells whether the run has emitted its own terminal event, after which a refusal
    (the workflow has ended) is expected and only stops the renewals.
    """

    def __init__(
        self, leasing: Leasing, workflow_id: str, tenant_id: str, ending: Callable[[], bool]
    ) -> None:
        self._leasing = leasing
        self._workflow_id = workflow_id
        self._tenant_id = tenant_id
        self._ending = ending
        self._task: asyncio.Task[None] | None = None
        self.lost: str | None = None

    async def start(self) -> None:
        """Take the lease, then keep it: a refusal cancels the calling task (the run)."""
        run = asyncio.current_task()
        assert run is not None
        interval = self._leasing.ttl_seconds / 3
        delay = interval
        try:
            await self._renew(interval)
        except LeaseRefused as refused:
            self._give_up(run, refused)
            return
        except Exception as exc:
            log.warning("could not take the run lease; retrying", extra={"error": str(exc)})
            delay = min(RETRY_SECONDS, interval)
        self._task = asyncio.create_task(self._keep(run, delay), name="run-lease")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _renew(self, within_seconds: float) -> None:
        await asyncio.wait_for(
            self._leasing.leases.renew(
                self._workflow_id,
                self._tenant_id,
                self._leasing.owner,
                self._leasing.ttl_seconds,
            ),
            within_seconds,
        )

    async def _keep(self, run: asyncio.Task[object], delay: float) -> None:
        interval = self._leasing.ttl_seconds / 3
        while True:
            await asyncio.sleep(delay)
            try:
                await self._renew(interval)
                delay = interval
            except LeaseRefused as refused:
                if not self._ending():
                    self._give_up(run, refused)
                return
            except Exception as exc:
                log.warning("could not renew the run lease; retrying", extra={"error": str(exc)})
                delay = min(RETRY_SECONDS, interval)

    def _give_up(self, run: asyncio.Task[object], refused: LeaseRefused) -> None:
        self.lost = str(refused)
        log.warning("run lease refused, stopping the run: %s", refused)
        run.cancel()
