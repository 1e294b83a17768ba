"""Token buckets for rate limits: in-process, or shared by every replica through Redis."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any, Protocol


class TokenBuckets(Protocol):
    async def take(self, key: str, capacity: float, refill_per_second: float) -> float:
        """Take one token; 0.0 when granted, else the seconds until one is available."""
        ...


@dataclass
class _Bucket:
    tokens: float
    stamp: float


class MemoryBuckets:
    """Buckets of this process only (the embedded default)."""

    def __init__(self) -> None:
        self._buckets: dict[str, _Bucket] = {}
        self._lock = asyncio.Lock()

    async def take(self, key: str, capacity: float, refill_per_second: float) -> float:
        async with self._lock:
            now = time.monotonic()
            bucket = self._buckets.setdefault(key, _Bucket(capacity, now))
            bucket.tokens = min(capacity, bucket.tokens + (now - bucket.stamp) * refill_per_second)
            bucket.stamp = now
            if bucket.tokens >= 1:
                bucket.tokens -= 1
                return 0.0
            return _wait(bucket.tokens, refill_per_second)


def _wait(tokens: float, refill_per_second: float) -> float:
    return (1 - tokens) / refill_per_second if refill_per_second > 0 else float("inf")


# One round trip, atomic in Redis, on Redis's own clock so replicas' clocks do not matter.
# Returns the tokens left after the attempt (as a string: Lua numbers become integers) and
# whether one was granted.
_TAKE = """
local capacity = tonumber(ARGV[1])
local rate = tonumber(ARGV[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local state = redis.call('HMGET', KEYS[1], 'tokens', 'stamp')
local tokens = tonumber(state[1]) or capacity
local stamp = tonumber(state[2]) or now
tokens = math.min(capacity, tokens + math.max(0, now - stamp) * rate)
local granted = 0
if tokens >= 1 then
  tokens = tokens - 1
  granted = 1
end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'stamp', tostring(now))
local ttl = 3600
if rate > 0 then ttl = math.ceil(capacity / rate) + 60 end
redis.call('EXPIRE', KEYS[1], ttl)
return {granted, tostring(tokens)}
"""


class RedisBuckets:
    """Buckets in Redis, shared by every tools-service replica."""

    def __init__(self, client: Any, prefix: str = "shuttle:ratelimit:") -> None:
        # `client` is a redis.asyncio.Redis; typed loosely because its stubs are generic.
        self._client = client
        self._prefix = prefix
        self._script = client.register_script(_TAKE)

    async def take(self, key: str, capacity: float, refill_per_second: float) -> float:
        granted, tokens = await self._script(
            keys=[self._prefix + key], args=[capacity, refill_per_second]
        )
        if int(granted):
            return 0.0
        return _wait(float(tokens), refill_per_second)

    async def close(self) -> None:
        await self._client.aclose()
