"""A background job repeated at a fixed interval until stopped, surviving its own failures."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

log = logging.getLogger(__name__)


class Periodic:
    """Runs `job` every `interval_seconds`; a failing pass is logged and the next one tries
    again (the usual cause is the database being briefly away)."""

    def __init__(
        self,
        name: str,
        job: Callable[[], Awaitable[Any]],
        interval_seconds: float,
        *,
        first_pass_at_once: bool = True,
    ) -> None:
        self._name = name
        self._job = job
        self._interval = interval_seconds
        self._first_pass_at_once = first_pass_at_once
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=self._name)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        if not self._first_pass_at_once:
            await asyncio.sleep(self._interval)
        while True:
            try:
                await self._job()
            except Exception:
                log.exception("%s failed; trying again in %.1f s", self._name, self._interval)
            await asyncio.sleep(self._interval)
