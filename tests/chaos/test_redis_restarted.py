"""Redis (the hot tier) is stopped mid-run, then started again empty."""

from __future__ import annotations

import asyncio
import time

import pytest

from tests.chaos.conftest import Scale, ScaledStack
from tests.chaos.harness import assert_clean, record_row, wait_for_progress
from tests.chaos.scenario import scenario

pytestmark = [pytest.mark.integration, pytest.mark.chaos]


async def test_runs_and_streams_go_on_through_a_redis_outage(
    scaled_stack: ScaledStack, scale: Scale
) -> None:
    stack = scaled_stack.stack
    async with scenario(stack) as chaos:
        ids = await chaos.start_runs(scale.runs, "redis-restarted")
        chaos.subscribe_to_every_run(scale.subscribers_per_run)

        await chaos.wait_until_mid_run()
        at_fault = await chaos.positions()
        stopped_at = time.monotonic()
        await asyncio.to_thread(scaled_stack.redis.stop)
        # With Redis down, the runs append and the subscribers receive (from SQL).
        await wait_for_progress(chaos.subscriptions, at_fault, "subscribers get news")
        recovery = time.monotonic() - stopped_at
        await asyncio.to_thread(scaled_stack.redis.start)
        audits = await chaos.finish()
        final = await chaos.positions()

    record_row(
        "redis-restarted",
        "Redis (hot tier) stopped mid-run, restarted empty",
        scale.name,
        audits,
        chaos.subscriptions,
        recovery,
        "stop to every subscriber receiving a newer event (Redis still down)",
    )
    assert_clean(audits, allow_ephemeral_skips=True)
    assert all(final[wf] > at_fault[wf] for wf in ids), (at_fault, final)
