"""PacedSignal: a crowd of waiters is woken in rounds, a lone one at once, nothing is lost."""

from __future__ import annotations

import asyncio

import pytest

from shuttle.paced_signal import MAX_SPACING_SECONDS, PacedSignal


class Crowd:
    """Waiters that count the wake-ups each of them sees. A waiter counts and waits again in
    one step, so once its count moved it is already back in `wait`."""

    def __init__(self, signal: PacedSignal, size: int) -> None:
        self.signal = signal
        self.wakes = [0] * size
        self._moved = asyncio.Event()
        self.tasks = [asyncio.create_task(self._follow(index)) for index in range(size)]

    async def _follow(self, index: int) -> None:
        while True:
            await self.signal.wait()
            self.wakes[index] += 1
            self._moved.set()

    async def started(self) -> None:
        await asyncio.sleep(0)  # each task runs up to its first wait
        assert self.signal.waiters == len(self.tasks)

    async def until_woken(self, times: int) -> None:
        async with asyncio.timeout(10):
            while min(self.wakes) < times:
                self._moved.clear()
                await self._moved.wait()
        assert self.signal.waiters == len(self.tasks)

    async def close(self) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)


async def test_a_burst_of_changes_wakes_a_crowd_twice() -> None:
    # 50 waiters at 2 ms each: after the first wake-up, the next may come 0.1 s later.
    crowd = Crowd(PacedSignal(seconds_per_waiter=0.002), 50)
    await crowd.started()
    for _ in range(1000):  # no await in between: all within one spacing
        crowd.signal.notify()
    await crowd.until_woken(2)  # the held changes wake them without another notify
    await asyncio.sleep(MAX_SPACING_SECONDS * 1.5)
    assert crowd.wakes == [2] * 50
    await crowd.close()


async def test_without_pacing_every_change_wakes_the_crowd() -> None:
    crowd = Crowd(PacedSignal(seconds_per_waiter=0.0), 20)
    await crowd.started()
    for round_number in range(1, 11):
        crowd.signal.notify()
        await crowd.until_woken(round_number)
    assert crowd.wakes == [10] * 20
    await crowd.close()


async def test_the_first_change_after_a_quiet_spell_wakes_at_once() -> None:
    # One waiter at 1 ms: quiet for longer than that, a change is not held.
    signal = PacedSignal(seconds_per_waiter=0.001)
    crowd = Crowd(signal, 1)
    await crowd.started()
    for round_number in range(1, 6):
        await asyncio.sleep(0.01)
        signal.notify()
        assert not signal.holding
        await crowd.until_woken(round_number)
    await crowd.close()


async def test_wake_now_wakes_at_once_and_drops_the_held_wake_up() -> None:
    crowd = Crowd(PacedSignal(seconds_per_waiter=1.0, max_spacing=60.0), 3)
    await crowd.started()
    crowd.signal.notify()
    await crowd.until_woken(1)
    crowd.signal.notify()  # within the spacing of the last wake-up: held
    assert crowd.signal.holding
    crowd.signal.wake_now()
    assert not crowd.signal.holding
    await crowd.until_woken(2)
    await asyncio.sleep(0.05)
    assert crowd.wakes == [2] * 3
    await crowd.close()


async def test_a_waiter_that_starts_after_a_wake_up_waits_for_the_next() -> None:
    signal = PacedSignal(seconds_per_waiter=0.0)
    signal.notify()
    late = asyncio.create_task(signal.wait())
    await asyncio.sleep(0.01)
    assert not late.done()
    signal.notify()
    await late


def test_a_negative_spacing_is_refused() -> None:
    with pytest.raises(ValueError, match="must not be negative"):
        PacedSignal(seconds_per_waiter=-0.001)
    with pytest.raises(ValueError, match="must not be negative"):
        PacedSignal(max_spacing=-1.0)


async def test_a_busy_crowd_is_paced_by_its_readers_not_by_who_waits() -> None:
    # Fifty readers all busy sending (none waiting): a change right after a wake-up is held.
    signal = PacedSignal(seconds_per_waiter=1.0, max_spacing=60.0)
    signal.readers = 50
    signal.notify()
    assert not signal.holding
    signal.notify()
    assert signal.holding
    signal.wake_now()


async def test_a_reader_just_served_joins_the_held_round() -> None:
    signal = PacedSignal(seconds_per_waiter=1.0, max_spacing=60.0)
    signal.readers = 2
    await signal.pace()  # nothing held: at once
    signal.notify()
    signal.notify()  # held
    paced = asyncio.create_task(signal.pace())
    await asyncio.sleep(0.01)
    assert not paced.done()
    signal.wake_now()
    await paced
