"""A subscriber stops reading while its run goes on to the end, then catches up."""

from __future__ import annotations

import pytest

from tests.chaos.conftest import Scale
from tests.chaos.harness import assert_clean, last_seq, read_log, record_row, wait_until
from tests.chaos.scenario import scenario
from tests.chaos.subscriber import Stall
from tests.support.stack import Stack

pytestmark = [pytest.mark.integration, pytest.mark.chaos]


async def test_a_stalled_subscriber_catches_up_without_holding_the_run_back(
    embedded_stack: Stack, scale: Scale
) -> None:
    async with scenario(embedded_stack) as chaos:
        ids = await chaos.start_runs(scale.runs, "stalled")
        stalls = [Stall(after_events=3) for _ in ids]
        for workflow_id, stall in zip(ids, stalls, strict=True):
            chaos.subscribe(workflow_id, stall=stall)
            for _ in range(scale.subscribers_per_run - 1):
                chaos.subscribe(workflow_id)

        async def every_run_has_ended() -> bool:
            logs = [await read_log(chaos.channel, wf) for wf in ids]
            return all(log and log[-1]["type"] == "STREAM_END" for log in logs)

        # The runs finish while their stalled readers read nothing.
        await wait_until(every_run_has_ended, "every run has ended", timeout_seconds=180)
        assert all(stall.stalled.is_set() for stall in stalls)
        for stall in stalls:
            stall.released.set()
        audits = await chaos.finish()
        final = {wf: await last_seq(chaos.channel, wf) for wf in ids}

    record_row(
        "stalled-subscriber",
        "a subscriber reads nothing until its run has ended, then catches up",
        scale.name,
        audits,
        chaos.subscriptions,
        max(stall.caught_up_seconds for stall in stalls),
        "release to STREAM_END for the stalled reader",
    )
    assert_clean(audits)
    # Each stalled reader stopped before its run's end: it had far more to catch up on.
    assert all(final[wf] > 3 * stall.after_events for wf, stall in zip(ids, stalls, strict=True))
