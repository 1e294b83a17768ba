"""The events service's background jobs (retention purge, lease sweep) repeat through failures."""

from __future__ import annotations

import asyncio

from shuttle.periodic import Periodic


async def test_a_failing_pass_is_followed_by_the_next_one() -> None:
    passes: list[int] = []
    third = asyncio.Event()

    async def job() -> None:
        passes.append(len(passes) + 1)
        if len(passes) == 3:
            third.set()
        if len(passes) == 1:
            raise RuntimeError("database briefly away")

    periodic = Periodic("test job", job, interval_seconds=0.01)
    periodic.start()
    await asyncio.wait_for(third.wait(), 30)
    await periodic.stop()
    stopped_at = len(passes)
    await asyncio.sleep(0.05)
    assert passes[:3] == [1, 2, 3]
    assert len(passes) == stopped_at  # nothing runs after stop


async def test_a_job_started_later_waits_one_interval_before_its_first_pass() -> None:
    ran = asyncio.Event()

    async def job() -> None:
        ran.set()

    periodic = Periodic("test job", job, interval_seconds=3600, first_pass_at_once=False)
    periodic.start()
    await asyncio.sleep(0.05)
    assert not ran.is_set()
    await periodic.stop()

    at_once = Periodic("test job", job, interval_seconds=3600)
    at_once.start()
    await asyncio.wait_for(ran.wait(), 30)
    await at_once.stop()
