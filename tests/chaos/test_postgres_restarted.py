"""PostgreSQL (the durable log) is stopped abruptly mid-run and started again."""

from __future__ import annotations

import asyncio
import time

import pytest

from tests.chaos.conftest import Scale, ScaledStack
from tests.chaos.harness import assert_clean, record_row, wait_for_progress
from tests.chaos.scenario import scenario

pytestmark = [pytest.mark.integration, pytest.mark.chaos]


async def test_no_event_is_lost_or_duplicated_when_postgres_restarts(
    scaled_stack: ScaledStack, scale: Scale
) -> None:
    stack = scaled_stack.stack
    async with scenario(stack) as chaos:
        ids = await chaos.start_runs(scale.runs, "postgres-restarted")
        chaos.subscribe_to_every_run(scale.subscribers_per_run)

        await chaos.wait_until_mid_run()
        at_fault = await chaos.positions()
        restarted_at = time.monotonic()
        await asyncio.to_thread(scaled_stack.postgres.restart)
        await wait_for_progress(chaos.subscriptions, at_fault, "subscribers resume")
        recovery = time.monotonic() - restarted_at
        audits = await chaos.finish()
        final = await chaos.positions()

    record_row(
        "postgres-restarted",
        "PostgreSQL stopped (immediate) mid-run, restarted",
        scale.name,
        audits,
        chaos.subscriptions,
        recovery,
        "stop to every subscriber receiving a newer event",
    )
    assert_clean(audits)
    assert all(final[wf] > at_fault[wf] for wf in ids), (at_fault, final)
