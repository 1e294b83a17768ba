"""A producer's schedule: indexes at a fixed rate."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator


async def paced(rate: float, count: int) -> AsyncIterator[int]:
    """Yields 0..count-1 at `rate` per second (catching up, never bursting ahead)."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    for index in range(count):
        delay = start + index / rate - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        yield index
