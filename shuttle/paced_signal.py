"""A change signal for many readers that wakes them no more often than they can be served.

One log fanned out to N readers costs N wake-ups and N messages per wake-up. Waking every
reader on every change made that N times the changes per second: at 1,000 events/s to 100
readers the work outran two cores and latency became queueing (p99 0.4 s over gRPC, 1.4 s
over SSE). Here the first change after a quiet spell wakes the waiters at once; while
changes keep coming, the next wake-up waits until `seconds_per_waiter` times the number of
readers has passed since the last one, and a reader just served joins that round (`pace`)
rather than taking the changes one by one. A lone reader is woken at once, a crowd in
rounds, and each reader takes what came meanwhile as one message. asyncio.Condition has no
such pacing (and re-takes its lock once per waiter).
"""

from __future__ import annotations

import asyncio

# About what serving one woken reader costs on two cores, all told: its read, its message out,
# the subscriber's side of it (docs/benchmarks.md, "Emit -> subscriber latency").
DEFAULT_SECONDS_PER_WAITER = 0.0001
# The gateway's SSE clients cost more each (a socket write through the ASGI stack): 100 clients
# of 1,000 events/s fell behind at 0.1 ms and kept up at 0.2 ms.
SECONDS_PER_SSE_CLIENT = 0.0002
# By default, however many wait, a change reaches them within this.
MAX_SPACING_SECONDS = 0.1


class PacedSignal:
    """`notify` wakes everyone in `wait`: at once after a quiet spell, else once the spacing
    for the current number of readers has passed since the last wake-up."""

    def __init__(
        self,
        seconds_per_waiter: float = DEFAULT_SECONDS_PER_WAITER,
        max_spacing: float = MAX_SPACING_SECONDS,
    ) -> None:
        if seconds_per_waiter < 0 or max_spacing < 0:
            raise ValueError("seconds_per_waiter and max_spacing must not be negative")
        self._per_waiter = seconds_per_waiter
        self._max_spacing = max_spacing
        # Replaced at each wake-up after setting it: a waiter holds the one current when it
        # started waiting, so it sees every wake-up after that and none before.
        self._event = asyncio.Event()
        self._last_wake = float("-inf")
        self._held: asyncio.TimerHandle | None = None
        self.waiters = 0
        self.readers = 0
        """Kept by the owner: how many follow the signal, waiting or busy. Spacing goes by
        the larger of this and the waiters: a crowd too busy to be back waiting is still a
        crowd, and counting only those waiting would wake the few on every change."""

    @property
    def holding(self) -> bool:
        """A change waits for its paced wake-up."""
        return self._held is not None

    async def wait(self) -> None:
        """Return at the next wake-up."""
        event = self._event
        self.waiters += 1
        try:
            await event.wait()
        finally:
            self.waiters -= 1

    async def pace(self) -> None:
        """Wait for the held wake-up, if there is one. A reader just served calls this
        before it looks for news, so it joins the next round instead of taking every change
        as it comes (which would bring back the message per change)."""
        if self._held is not None:
            await self.wait()

    def notify(self) -> None:
        """Something changed: wake the waiters now, or at the paced time (one timer at most)."""
        if self._held is not None:
            return  # the wake-up due will cover this change too
        loop = asyncio.get_running_loop()
        spacing = min(self._max_spacing, max(self.readers, self.waiters) * self._per_waiter)
        due = self._last_wake + spacing
        if loop.time() >= due:
            self._wake()
        else:
            self._held = loop.call_at(due, self._wake)

    def wake_now(self) -> None:
        """Wake the waiters at once (the log ended, or was deleted)."""
        self._wake()

    def _wake(self) -> None:
        if self._held is not None:
            self._held.cancel()
            self._held = None
        self._last_wake = asyncio.get_running_loop().time()
        event, self._event = self._event, asyncio.Event()
        event.set()
