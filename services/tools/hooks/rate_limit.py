"""Rate limiter: a token bucket per tenant and tool."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from services.tools.buckets import MemoryBuckets, TokenBuckets
from services.tools.hooks.base import ALLOW, Hook, HookContext, PreResult, block


@dataclass(kw_only=True)
class RateLimitHook(Hook):
    name: str = "rate_limit"
    fail_closed: bool = True
    priority: int = 30
    # Burst size, and tokens added per second (e.g. 10 and 1/6: bursts of 10, 10 a minute).
    capacity: float = 10.0
    refill_per_second: float = 1.0
    buckets: TokenBuckets = field(default_factory=MemoryBuckets)

    def __post_init__(self) -> None:
        if self.capacity < 1 or self.refill_per_second < 0:
            raise ValueError(
                f"hook {self.name!r}: capacity must be >= 1 and refill_per_second >= 0"
            )

    async def pre(self, ctx: HookContext) -> PreResult:
        key = f"{self.name}:{ctx.tenant_id}:{ctx.tool.name}"
        wait = await self.buckets.take(key, self.capacity, self.refill_per_second)
        if wait <= 0:
            return ALLOW
        when = "later" if math.isinf(wait) else f"in {max(1, math.ceil(wait))} s"
        return block(
            f"rate limit reached for {ctx.tool.name} ({self.capacity:g} calls, "
            f"{self.refill_per_second:g} more per second); try again {when} or use another "
            "approach"
        )
