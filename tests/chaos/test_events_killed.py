"""The events service is killed (-9) mid-run and restarted on the same port and database."""

from __future__ import annotations

import asyncio
import time

import pytest

from tests.chaos.conftest import Scale
from tests.chaos.harness import assert_clean, record_row, wait_for_progress
from tests.chaos.scenario import scenario
from tests.support.processes import restart_supervised
from tests.support.stack import Stack

pytestmark = [pytest.mark.integration, pytest.mark.chaos]


async def test_no_event_is_lost_or_duplicated_when_the_events_service_is_killed(
    embedded_stack: Stack, scale: Scale
) -> None:
    async with scenario(embedded_stack) as chaos:
        ids = await chaos.start_runs(scale.runs, "events-killed")
        chaos.subscribe_to_every_run(scale.subscribers_per_run)

        await chaos.wait_until_mid_run()
        at_fault = await chaos.positions()
        killed_at = time.monotonic()
        await asyncio.to_thread(restart_supervised, embedded_stack.supervisor, "events")
        await wait_for_progress(chaos.subscriptions, at_fault, "subscribers resume")
        recovery = time.monotonic() - killed_at
        audits = await chaos.finish()
        final = await chaos.positions()

    record_row(
        "events-killed",
        "events service killed (-9) mid-run, restarted",
        scale.name,
        audits,
        chaos.subscriptions,
        recovery,
        "kill to every subscriber receiving a newer event",
    )
    assert_clean(audits)
    # The fault hit every run mid-way: each appended more after it.
    assert all(final[wf] > at_fault[wf] for wf in ids), (at_fault, final)
    # The gateway rode out the restart: every subscriber kept its one connection.
    assert all(s.connections == 1 for s in chaos.subscriptions), [
        (s.connections, s.errors) for s in chaos.subscriptions
    ]
