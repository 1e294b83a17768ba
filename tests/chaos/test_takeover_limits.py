"""Takeover at its limits, on three executors (PostgreSQL, Redis): a rolling restart
(SIGTERM to each executor in turn, started again before the next) under runs held in flight
leaves every run completed as an uninterrupted one; a run whose owner keeps dying is taken
over SHUTTLE_RUN_MAX_TAKEOVERS times and then ends with the fatal EXECUTOR_LOST."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import grpc
import pytest

from tests.chaos.conftest import Scale
from tests.chaos.harness import (
    assert_clean,
    is_resumption,
    is_terminal,
    read_log,
    record_row,
    wait_until,
)
from tests.chaos.takeover import (
    LEASE_SECONDS,
    MAX_TAKEOVERS,
    ChaosRun,
    Kit,
    finish_and_check,
    frame,
    owner_pid,
    start_run,
    tag,
    workflow,
)
from tests.chaos.takeover_points import ModelCall, reference_answer, until_arrived
from tests.chaos.takeover_stacks import ReplicatedTarget

pytestmark = [pytest.mark.integration, pytest.mark.chaos]


@pytest.fixture(autouse=True)
def released(takeover_kit: Kit, takeover_replicas: ReplicatedTarget) -> Iterator[None]:
    yield
    takeover_kit.release_all()
    takeover_replicas.revive()


async def owners(channel: grpc.aio.Channel, runs: list[ChaosRun]) -> dict[str, str]:
    return {run.workflow_id: (await workflow(channel, run.workflow_id)).lease_owner for run in runs}


async def test_a_rolling_restart_leaves_every_run_completed(
    takeover_replicas: ReplicatedTarget, takeover_kit: Kit, scale: Scale
) -> None:
    stack, kit = takeover_replicas, takeover_kit
    label = tag("rolling restart")
    async with frame(stack, kit) as ctx:
        reference = await reference_answer(ctx, ModelCall(), label)
        runs = [ChaosRun(f"{label} run {n}.") for n in range(scale.rolling_runs)]
        # Every run waits on its second model call for the whole roll: each executor goes
        # down with runs to hand over, and a run handed over asks again (held again).
        holds = [kit.model.hold_call(run.question, tool_results=1) for run in runs]
        for run in runs:
            await start_run(ctx, run, "standard", subscribers=1)
        for run, hold in zip(runs, holds, strict=True):
            await until_arrived(hold, f"{run.question}: its model call is held")
        before = {
            run.workflow_id: (await workflow(ctx.chaos.channel, run.workflow_id)) for run in runs
        }
        started = time.monotonic()
        exits = {}
        for name in stack.executor_names():
            exits[name] = await asyncio.to_thread(stack.stop_executor, name)
            await asyncio.to_thread(stack.stack.restart, name)
        rolled = time.monotonic() - started
        for hold in holds:
            hold.release()
        outcome = await finish_and_check(
            ctx, runs, {run.workflow_id: None for run in runs}, reference, rolled
        )
        after = {
            run.workflow_id: (await workflow(ctx.chaos.channel, run.workflow_id)) for run in runs
        }

    record_row(
        "rolling-restart",
        f"every executor in turn stopped (SIGTERM) and started again, {len(runs)} runs in flight",
        scale.name,
        outcome.audits,
        outcome.subscriptions,
        rolled,
        "the whole roll: three executors stopped and started again, one after another",
    )
    assert exits == dict.fromkeys(exits, 0), exits  # each stopped cleanly, runs handed over
    assert outcome.problems == {wf: [] for wf in outcome.problems}, outcome.problems
    assert_clean(outcome.audits)
    # Every process that held a run was stopped: each run ended under a new owner.
    moved = {wf: (before[wf], after[wf]) for wf in before}
    assert all(old != new for old, new in moved.values()), moved


async def test_a_run_taken_over_too_often_ends_executor_lost(
    takeover_replicas: ReplicatedTarget, takeover_kit: Kit, scale: Scale
) -> None:
    stack, kit = takeover_replicas, takeover_kit
    async with frame(stack, kit) as ctx:
        run = ChaosRun(f"{tag('max takeovers')} run 0.")
        hold = kit.model.hold_call(run.question, tool_results=1)  # held by every owner
        await start_run(ctx, run, "standard", subscribers=1)
        killed_at = 0.0
        for kills in range(1, MAX_TAKEOVERS + 2):
            await until_arrived(hold, f"{run.question}: its model call is held")
            hold.arrivals = 0
            owner = (await workflow(ctx.chaos.channel, run.workflow_id)).lease_owner
            killed_at = time.monotonic()
            await asyncio.to_thread(stack.kill_executor, owner_pid(owner))
            if kills > MAX_TAKEOVERS:
                break

            async def resumed(times: int = kills) -> bool:
                found = sum(1 for e in run.watcher.events if is_resumption(e))
                ended = [e for e in run.watcher.events if is_terminal(e)]
                assert not ended, f"ended after {found} takeovers: {ended[-1]['payload']}"
                return found == times

            await wait_until(resumed, f"takeover {kills}", timeout_seconds=180)
            # The next kill needs an executor left to claim the run.
            await asyncio.to_thread(stack.revive)

        async def ended() -> bool:
            return any(is_terminal(e) for e in run.watcher.events)

        await wait_until(ended, "the run ends", timeout_seconds=180)
        recovery = time.monotonic() - killed_at
        audits = await ctx.chaos.finish(terminal="ERROR_OCCURRED", resumable=True)
        log = await read_log(ctx.chaos.channel, run.workflow_id)

    record_row(
        "max-takeovers",
        f"the owner of a run killed (-9) {MAX_TAKEOVERS + 1} times "
        f"(SHUTTLE_RUN_MAX_TAKEOVERS={MAX_TAKEOVERS}, lease {LEASE_SECONDS:g} s)",
        scale.name,
        audits,
        run.subscriptions,
        recovery,
        "last kill to the fatal EXECUTOR_LOST at a subscriber",
    )
    assert_clean(audits)
    resumptions = [e["payload"] for e in log if is_resumption(e)]
    assert [p.get("attempt") for p in resumptions] == list(range(1, MAX_TAKEOVERS + 1))
    assert {p.get("max_attempts") for p in resumptions} == {MAX_TAKEOVERS}
    (lost,) = [e["payload"] for e in log if is_terminal(e)]
    assert lost["error_type"] == "EXECUTOR_LOST", lost
    assert (lost["fatal"], lost["recoverable"]) == (True, False)
    assert [e["type"] for e in log][-2:] == ["ERROR_OCCURRED", "STREAM_END"]
