"""Per-key request limits (moving window, in process) with the wait a refused caller needs."""

from __future__ import annotations

import math
import time

from limits import parse
from limits.aio.storage import MemoryStorage
from limits.aio.strategies import MovingWindowRateLimiter


class RateLimiter:
    def __init__(self, rate: str) -> None:
        self._item = parse(rate)
        self._limiter = MovingWindowRateLimiter(MemoryStorage())
        self.rate = rate

    async def check(self, identity: str) -> int | None:
        """None when `identity` may go on, else the seconds to wait (for Retry-After)."""
        if await self._limiter.hit(self._item, identity):
            return None
        stats = await self._limiter.get_window_stats(self._item, identity)
        return max(1, math.ceil(stats.reset_time - time.time()))
