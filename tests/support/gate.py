"""A gate where requests served on another thread's event loop wait until the test opens
it: tool calls or model calls held in flight while a fault is injected."""

from __future__ import annotations

import asyncio
import threading


class Gate:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open = False
        self._waiting: list[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = []

    @property
    def is_open(self) -> bool:
        return self._open

    async def wait(self) -> None:
        """Return once the gate is open (at once if it is)."""
        opened = asyncio.Event()
        with self._lock:
            if self._open:
                return
            self._waiting.append((asyncio.get_running_loop(), opened))
        await opened.wait()

    def open(self) -> None:
        """Release every waiter, from any thread; later waiters pass straight through."""
        with self._lock:
            self._open = True
            waiting, self._waiting = self._waiting, []
        for loop, opened in waiting:
            if not loop.is_closed():
                loop.call_soon_threadsafe(opened.set)
