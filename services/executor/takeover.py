"""Taking runs over: every replica claims, every poll, the runs whose executor is gone (their
lease lapsed) or handed them over (SIGTERM), and goes on with each from its log.

A claim gives this replica the run's lease at the next epoch, which fences the old owner:
its appends are refused from then on. The run's log is read whole and folded into the state
the run goes on from (recovery/); the log then says so, ERROR_RECOVERY{EXECUTOR_LOST,
resumed}, unless the run was taken over too often, in which case it ends as an executor
lost (fatal ERROR_OCCURRED{EXECUTOR_LOST}).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Sequence

from services.executor.commands.feed import RunReceiver
from services.executor.engine.state import RunContext
from services.executor.lease import Leasing
from services.executor.log.closing import fail
from services.executor.log.reporter import RunReporter
from services.executor.ports import ClaimedRun, RunLog, ToolDefinition
from services.executor.recovery.run import EXECUTOR_LOST, RunRecovery, Tuning, fold_run
from shuttle.metrics import RUN_TAKEOVER_SECONDS, RUNS_RESUMED

log = logging.getLogger(__name__)

CLAIM_LIMIT = 10
"""Runs claimed per poll: a replica takes its share, and polls again soon for more."""


class TakeoverPoller:
    """Claims runs every `leasing.takeover_poll_seconds` and hands each to `take_over`."""

    def __init__(self, leasing: Leasing, take_over: Callable[[ClaimedRun], None]) -> None:
        self._leasing = leasing
        self._take_over = take_over
        self._task: asyncio.Task[None] | None = None
        self._warned = False

    def start(self) -> None:
        self._task = asyncio.create_task(self._poll(), name="run-takeovers")

    async def stop(self) -> None:
        """Claim no more. (A claim cut short may still have been granted: its runs lapse
        and are claimed again elsewhere, one lease later.)"""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _poll(self) -> None:
        leasing = self._leasing
        while True:
            try:
                claimed = await leasing.leases.claim(
                    leasing.owner, leasing.ttl_seconds, CLAIM_LIMIT
                )
            except Exception as exc:
                if not self._warned:
                    log.warning("cannot claim runs (trying again)", extra={"error": str(exc)})
                self._warned = True
                claimed = []
            for run in claimed:
                log.info("run taken over", extra={"workflow_id": run.workflow_id})
                self._take_over(run)
            if len(claimed) < CLAIM_LIMIT:
                await asyncio.sleep(leasing.takeover_poll_seconds)


async def recover(
    claimed: ClaimedRun,
    ctx: RunContext,
    reporter: RunReporter,
    receiver: RunReceiver,
    *,
    run_log: RunLog,
    catalog: Sequence[ToolDefinition],
    tuning: Tuning,
    leasing: Leasing,
) -> RunRecovery | None:
    """The run as its log left it, its commands restored into `receiver` and the takeover
    on the log; None when the run ended instead (taken over too often)."""
    if claimed.takeovers > leasing.max_takeovers:
        await fail(
            reporter,
            claimed.workflow_id,
            EXECUTOR_LOST,
            f"The executors running this task stopped {claimed.takeovers} times (at most "
            f"{leasing.max_takeovers} takeovers, SHUTTLE_RUN_MAX_TAKEOVERS): the run cannot "
            "continue. Retry the task.",
            {"attempt": claimed.takeovers, "max_attempts": leasing.max_takeovers},
        )
        return None
    claimed_at = time.time()
    events = await run_log.read(claimed.workflow_id, claimed.tenant_id)
    recovery = fold_run(events, ctx, catalog, tuning)
    receiver.restore(recovery.controls, recovery.follow_ups, recovery.taken)
    # The claim came at most one poll after the lease lapsed (a release sets the run's last
    # append just before): this is an upper bound within a poll interval.
    lapsed_at = max(claimed.last_append_at, claimed_at - leasing.takeover_poll_seconds)
    handed_over = claimed.takeovers == recovery.takeovers
    await reporter.recovered(
        f"Run resumed by another executor after its executor was "
        f"{'stopped' if handed_over else 'lost'}",
        {
            "error_type": EXECUTOR_LOST,
            "recovery_action": "resumed",
            "attempt": claimed.takeovers,
            "max_attempts": leasing.max_takeovers,
            "from_seq": recovery.last_seq + 1,
            "lost_owner": recovery.owner,
            "owner": leasing.owner,
            "handed_over": handed_over,
        },
    )
    RUNS_RESUMED.inc()
    RUN_TAKEOVER_SECONDS.observe(max(0.0, time.time() - lapsed_at))
    return recovery
