"""Pause, resume and cancel as the owning run sees them, acted on at checkpoints.

Commands arrive as log events (WORKFLOW_PAUSING, WORKFLOW_RESUMED, WORKFLOW_CANCELLING) from
any replica, possibly twice (the command feed and the local shortcut) and possibly out of
order; the state is a function of the latest pause/resume by seq, and cancel is final.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Protocol, TypeVar

_T = TypeVar("_T")


class RunCancelled(Exception):
    def __init__(self, checkpoint: str, reason: str) -> None:
        super().__init__(f"cancelled at {checkpoint}: {reason}")
        self.checkpoint = checkpoint
        self.reason = reason


class PauseReporter(Protocol):
    @property
    def last_seq(self) -> int: ...

    async def workflow_paused(self, checkpoint: str) -> None: ...

    async def workflow_resumed(self, reason: str) -> None: ...

    async def flush(self) -> None: ...


class Checkpoints(Protocol):
    """Where an agent asks whether it may go on (RunControl, or a team's shared view)."""

    async def checkpoint(self, where: str, reporter: PauseReporter) -> None: ...

    async def wait_cancelled(self) -> str:
        """The reason, once a cancel arrives."""
        ...


async def until_cancelled(control: Checkpoints, where: str, work: Awaitable[_T]) -> _T:
    """`work`'s result, or RunCancelled as soon as a cancel arrives: for work that reaches no
    checkpoint for long (a tool call waiting on a human's approval), which is cancelled."""
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(control.wait_cancelled())
    try:
        await asyncio.wait((task, watcher), return_when=asyncio.FIRST_COMPLETED)
        if task.done():
            return task.result()
        reason = watcher.result()
    finally:
        watcher.cancel()
        if not task.done():  # cancelled, or this call was
            task.cancel()
            await asyncio.wait((task,))
    raise RunCancelled(where, reason)


class RunControl:
    def __init__(self) -> None:
        self._pause_seq = 0
        self._resume_seq = 0
        self._paused_seq = 0
        """The latest WORKFLOW_PAUSED: a pause older than it has been reported already."""
        self._cancel_reason: str | None = None
        # Made when first waited on: most runs never pause, and a run that waits on its
        # model should hold no more than it needs.
        self._changed: asyncio.Event | None = None
        self._cancelled: asyncio.Event | None = None

    def apply(self, seq: int, event_type: str, reason: str = "") -> None:
        if event_type == "WORKFLOW_PAUSING":
            self._pause_seq = max(self._pause_seq, seq)
        elif event_type == "WORKFLOW_RESUMED":
            self._resume_seq = max(self._resume_seq, seq)
        elif event_type == "WORKFLOW_PAUSED":
            # Read back from the log by a run taken over while paused: it stays paused
            # without saying so twice.
            self._paused_seq = max(self._paused_seq, seq)
            return
        elif event_type == "WORKFLOW_CANCELLING" and self._cancel_reason is None:
            self._cancel_reason = reason or "cancelled by request"
            if self._cancelled is not None:
                self._cancelled.set()
        else:
            return
        if self._changed is not None:
            self._changed.set()

    @property
    def pause_requested(self) -> bool:
        return self._pause_seq > self._resume_seq

    @property
    def cancel_requested(self) -> bool:
        return self._cancel_reason is not None

    async def wait_cancelled(self) -> str:
        """Return the reason once a cancel arrives (for work that cannot wait for a checkpoint)."""
        if self._cancel_reason is None:
            if self._cancelled is None:
                self._cancelled = asyncio.Event()
            await self._cancelled.wait()
        return self._cancel_reason or "cancelled by request"

    async def checkpoint(self, where: str, reporter: PauseReporter) -> None:
        """Return when the run may go on; raise RunCancelled when it must stop."""
        self._raise_if_cancelled(where)
        if not self.pause_requested:
            return
        if self._paused_seq > self._pause_seq:
            paused_at = self._paused_seq
        else:
            await reporter.workflow_paused(where)
            await reporter.flush()
            paused_at = self._paused_seq = reporter.last_seq
        while self.pause_requested and not self.cancel_requested:
            if self._changed is None:
                self._changed = asyncio.Event()
            self._changed.clear()
            await self._changed.wait()
        self._raise_if_cancelled(where)
        if self._resume_seq < paused_at:
            # The resume was logged before our WORKFLOW_PAUSED: say again that we are running,
            # or the workflow's status would stay "paused".
            await reporter.workflow_resumed("resumed before the pause took effect")

    def _raise_if_cancelled(self, where: str) -> None:
        if self._cancel_reason is not None:
            raise RunCancelled(where, self._cancel_reason)
