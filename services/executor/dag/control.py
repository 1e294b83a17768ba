"""Pause, resume and cancel for a whole team: the run's one RunControl, shared by every step."""

from __future__ import annotations

import asyncio

from services.executor.policies.control import PauseReporter, RunControl


class TeamControl:
    """Steps reach their checkpoints concurrently; one at a time passes, so a pause is
    reported once (one WORKFLOW_PAUSED) while every step waits for the resume."""

    def __init__(self, control: RunControl, reporter: PauseReporter) -> None:
        self._control = control
        self._reporter = reporter
        self._lock = asyncio.Lock()

    async def checkpoint(self, where: str, reporter: PauseReporter) -> None:
        async with self._lock:
            await self._control.checkpoint(where, reporter)

    async def pause_point(self, where: str) -> None:
        """The coordinator's own checkpoint (before a step starts, before replanning)."""
        await self.checkpoint(where, self._reporter)

    async def wait_cancelled(self) -> str:
        return await self._control.wait_cancelled()
