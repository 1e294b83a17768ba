"""Per-key request limits (moving window) with the wait a refused caller needs.

With Redis configured the windows live there, so one key's limit holds across every gateway
replica (the `limits` library's Redis storage, on redis-py). While Redis cannot be reached,
each replica counts in its own memory instead: the API stays up, still bounded per replica,
rather than refusing everyone or counting no one.
"""

from __future__ import annotations

import logging
import math
import time

from limits import RateLimitItem, parse
from limits.aio.storage import MemoryStorage, RedisStorage, Storage
from limits.aio.strategies import MovingWindowRateLimiter
from limits.errors import StorageError

log = logging.getLogger(__name__)

# After Redis fails a check, requests count locally this long before it is tried again, so
# an unreachable Redis costs one timeout per interval rather than one per request.
RETRY_REDIS_SECONDS = 5.0
# At most one warning per this many seconds while Redis is out of reach.
WARN_INTERVAL_SECONDS = 60.0


class RateLimiter:
    def __init__(self, rate: str, redis_url: str = "", key_prefix: str = "shuttle:") -> None:
        self._item: RateLimitItem = parse(rate)
        self._local = MovingWindowRateLimiter(MemoryStorage())
        self._shared = (
            MovingWindowRateLimiter(_redis_storage(redis_url, key_prefix)) if redis_url else None
        )
        self._redis_retry_at = -math.inf
        self._warned_at = -math.inf
        self.rate = rate

    async def check(self, identity: str) -> int | None:
        """None when `identity` may go on, else the seconds to wait (for Retry-After)."""
        if self._shared is not None and time.monotonic() >= self._redis_retry_at:
            try:
                return await self._check(self._shared, identity)
            except StorageError as exc:
                self._redis_retry_at = time.monotonic() + RETRY_REDIS_SECONDS
                self._warn(exc)
        return await self._check(self._local, identity)

    async def _check(self, limiter: MovingWindowRateLimiter, identity: str) -> int | None:
        if await limiter.hit(self._item, identity):
            return None
        stats = await limiter.get_window_stats(self._item, identity)
        return max(1, math.ceil(stats.reset_time - time.time()))

    def _warn(self, exc: StorageError) -> None:
        now = time.monotonic()
        if now - self._warned_at >= WARN_INTERVAL_SECONDS:
            self._warned_at = now
            log.warning(
                "rate limits: Redis unreachable (%s); counting in this replica until it is back",
                exc.storage_error,
            )


def _redis_storage(redis_url: str, key_prefix: str) -> Storage:
    # `limits` names its async storages by an `async+` scheme; wrap_exceptions turns the
    # client's errors into StorageError, which `check` falls back on.
    return RedisStorage(
        f"async+{redis_url}",
        implementation="redispy",
        key_prefix=f"{key_prefix}ratelimit",
        wrap_exceptions=True,
        socket_connect_timeout=1.0,
        socket_timeout=1.0,
    )
