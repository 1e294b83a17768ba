"""One replica of events, tools, planner or gateway is killed (-9) under load while its twin
runs on: runs in flight go on through the survivor, subscribers of a lost gateway follow
through the other one with Last-Event-ID. (A lost executor's runs are taken over by another:
see test_executor_lost.py and the takeover matrix, test_takeover_*.py.)"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest

from tests.chaos.conftest import Scale
from tests.chaos.harness import assert_clean, record_row, wait_for_progress
from tests.chaos.scenario import Scenario
from tests.support.replicated_stack import ReplicatedStack, replicated_stack
from tests.support.scripted_openai import ScriptedOpenAI

pytestmark = [pytest.mark.integration, pytest.mark.chaos]

COUNTS = {"events": 2, "tools": 2, "planner": 2, "executor": 1, "gateway": 2}


@pytest.fixture(scope="module")
def replicas(
    model_server: ScriptedOpenAI, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ReplicatedStack]:
    data_dir = Path(tmp_path_factory.mktemp("chaos-replicas"))
    env = {"SHUTTLE_AUTH": "off", "SHUTTLE_RATE_LIMIT": "100000/minute"}
    with replicated_stack(data_dir, COUNTS, model_server.base_url, env) as stack:
        yield stack


@asynccontextmanager
async def scenario(stack: ReplicatedStack) -> AsyncIterator[Scenario]:
    """Runs submitted to the first gateway; subscribers fall back to the second."""
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=20)
    timeout = httpx.Timeout(30.0, read=None)
    first, second = stack.gateways
    async with (
        httpx.AsyncClient(base_url=first, timeout=timeout, limits=limits) as client,
        httpx.AsyncClient(base_url=second, timeout=timeout, limits=limits) as fallback,
        stack.channel("events") as channel,
    ):
        frame = Scenario(client, channel, fallbacks=[fallback])
        try:
            yield frame
        finally:
            frame.cancel()


@pytest.mark.parametrize("service", ["events", "tools", "planner", "gateway"])
async def test_no_run_fails_and_no_event_is_lost_when_one_replica_is_killed(
    replicas: ReplicatedStack, scale: Scale, service: str
) -> None:
    # Replica 1: for the gateway, the one every subscriber is connected to.
    victim = service
    async with scenario(replicas) as chaos:
        ids = await chaos.start_runs(scale.runs, f"{service}-replica-lost")
        chaos.subscribe_to_every_run(scale.subscribers_per_run)

        await chaos.wait_until_mid_run()
        at_fault = await chaos.positions()
        killed_at = time.monotonic()
        await asyncio.to_thread(replicas.kill, victim)
        await wait_for_progress(chaos.subscriptions, at_fault, "subscribers go on")
        recovery = time.monotonic() - killed_at
        audits = await chaos.finish()
        final = await chaos.positions()
    await asyncio.to_thread(replicas.restart, victim)

    record_row(
        f"replica-lost-{service}",
        f"one of two {service} replicas killed (-9) under load",
        scale.name,
        audits,
        chaos.subscriptions,
        recovery,
        "kill to every subscriber receiving a newer event",
    )
    assert_clean(audits)
    assert all(final[wf] > at_fault[wf] for wf in ids), (at_fault, final)
    if service == "gateway":
        # Every subscriber lost its connection and went on through the other gateway.
        assert all(s.connections >= 2 for s in chaos.subscriptions), [
            (s.connections, s.errors) for s in chaos.subscriptions
        ]
