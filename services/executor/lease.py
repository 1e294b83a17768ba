"""The run lease, from the executor's side: held for as long as a run lives.

A run whose lease lapses (its executor is presumed dead) is taken over by another replica
at the next epoch, so a live run renews every third of the lease, at its own epoch. A
refused renewal means the run is someone else's now, or was ended without us (the lease
lapsed, e.g. after a long stall): the run is cancelled at once, appending nothing (its
appends would be refused anyway: they carry the old epoch).
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
    """How this executor leases its runs: the events service port, its name, the lease, and
    how it takes runs over (see takeover.py)."""

    leases: RunLeases
    owner: str
    ttl_seconds: float
    takeover_poll_seconds: float = 1.0
    max_takeovers: int = 3

    def keeper(
        self, workflow_id: str, tenant_id: str, ending: Callable[[], bool], epoch: int = 0
    ) -> LeaseKeeper:
        return LeaseKeeper(self, workflow_id, tenant_id, ending, epoch)


class LeaseKeeper:
    """Renews one run's lease in the background; `lost` says why it was refused, if it was.

    `ending` tells whether the run has emitted its own terminal event, after which a refusal
    (the workflow has ended) is expected and only stops the renewals. Between renewals a run
    holds only a timer: a renewal task exists while a renewal is in flight.
    """

    def __init__(
        self,
        leasing: Leasing,
        workflow_id: str,
        tenant_id: str,
        ending: Callable[[], bool],
        epoch: int = 0,
    ) -> None:
        self._leasing = leasing
        self._workflow_id = workflow_id
        self._tenant_id = tenant_id
        self._ending = ending
        self.epoch = epoch
        """The epoch the run holds its lease at (0: unfenced, as before epochs)."""
        self._run: asyncio.Task[object] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._renewal: asyncio.Task[None] | None = None
        self._stopped = False
        self.lost: str | None = None

    @property
    def _interval(self) -> float:
        return self._leasing.ttl_seconds / 3

    def start(self) -> None:
        """Keep the lease: a refusal cancels the calling task (the run).

        The first renewal comes a third of the lease from now, like every other: the run's
        workflow was just created leased to us (or claimed by us), so the lease is fresh.
        """
        run = asyncio.current_task()
        assert run is not None
        self._run = run
        self._schedule(self._interval)

    async def stop(self) -> None:
        self._stopped = True
        timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()
        renewal, self._renewal = self._renewal, None
        if renewal is not None:
            renewal.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renewal

    def _schedule(self, delay: float) -> None:
        if not self._stopped:
            self._timer = asyncio.get_running_loop().call_later(delay, self._start_renewal)

    def _start_renewal(self) -> None:
        self._timer = None
        self._renewal = asyncio.create_task(self._renew_in_background(), name="run-lease")

    async def _renew_in_background(self) -> None:
        try:
            await self._renew()
            delay = self._interval
        except LeaseRefused as refused:
            self._renewal = None
            if not self._ending():
                self._give_up(refused)
            return
        except Exception as exc:
            log.warning("could not renew the run lease; retrying", extra={"error": str(exc)})
            delay = min(RETRY_SECONDS, self._interval)
        self._renewal = None
        self._schedule(delay)

    async def _renew(self) -> None:
        await asyncio.wait_for(
            self._leasing.leases.renew(
                self._workflow_id,
                self._tenant_id,
                self._leasing.owner,
                self._leasing.ttl_seconds,
                self.epoch,
            ),
            self._interval,
        )

    async def release(self) -> None:
        """Hand the run over (after `stop`): another replica claims it at its next poll (or,
        when the release fails, once the lease has lapsed)."""
        try:
            await self._leasing.leases.release(
                self._workflow_id, self._tenant_id, self._leasing.owner, self.epoch
            )
        except Exception as exc:
            log.warning("could not release the run's lease", extra={"error": str(exc)})

    def _give_up(self, refused: LeaseRefused) -> None:
        self.lost = str(refused)
        log.warning("run lease refused, stopping the run: %s", refused)
        if self._run is not None:
            self._run.cancel()
