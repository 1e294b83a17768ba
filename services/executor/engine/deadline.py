"""The run deadline: a run past SHUTTLE_RUN_TIMEOUT_SECONDS stops where it stands and ends
with an answer made from what it has, after ERROR_OCCURRED{TIMEOUT, fatal: false}. (A
team's answer then: dag/deadline.py.)

The deadline counts from the run's start (WORKFLOW_STARTED), so a run taken over by another
executor keeps the deadline it had.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import TypeVar

from services.executor.engine.answer import stream_answer
from services.executor.engine.state import LoopState, RunContext, Stage
from services.executor.engine.synthesis import fallback_answer
from services.executor.log.reporter import RunReporter
from shuttle.llm.protocol import LLM, DeadlineExceeded

T = TypeVar("T")

TIMEOUT = "TIMEOUT"
ANSWER_GRACE_SECONDS = 30.0
"""How long the answer of a run out of time may still take: a synthesis cut off at the
deadline would leave the user with nothing but a draft, a slow one would keep the run."""


@dataclass(frozen=True)
class RunDeadline:
    """When a run must end: `at` on the monotonic clock, `timeout_seconds` after its start."""

    at: float
    timeout_seconds: float

    @classmethod
    def from_start(cls, started: float, timeout_seconds: float) -> RunDeadline:
        """`started`: when the run started (monotonic clock; a takeover's from its log)."""
        return cls(started + timeout_seconds, timeout_seconds)

    @property
    def started(self) -> float:
        return self.at - self.timeout_seconds

    def left(self) -> float:
        return max(0.0, self.at - time.monotonic())

    async def run(self, work: Awaitable[T]) -> T | None:
        """What `work` returns; None when the deadline came first (a model call given up
        for lack of time counts too)."""
        try:
            async with asyncio.timeout(self.left()) as timer:
                return await work
        except TimeoutError:
            if not timer.expired():
                raise
        except DeadlineExceeded:
            pass
        return None

    async def report(self, reporter: RunReporter, agent_id: str = "") -> None:
        message = (
            f"The run took longer than {self.timeout_seconds:g} s (SHUTTLE_RUN_TIMEOUT_SECONDS): "
            "it ends with an answer from what it found"
        )
        await reporter.error(
            TIMEOUT,
            message,
            fatal=False,
            agent_id=agent_id,
            extra={"timeout_seconds": self.timeout_seconds},
        )


async def answer_agent(
    llm: LLM,
    reporter: RunReporter,
    query: str,
    ctx: RunContext,
    state: LoopState,
    deadline: RunDeadline,
) -> None:
    """End an agent stopped by the deadline: its answer (synthesised within the grace, else
    the best draft) and AGENT_COMPLETED."""
    if state.stage is Stage.DONE:
        return
    if not state.answered:
        restarting = state.stage is Stage.ANSWER  # its answer may have begun streaming
        if not restarting:
            state.answer = fallback_answer(state.steps)
            state.stage = Stage.ANSWER
        within = llm.with_deadline(time.monotonic() + ANSWER_GRACE_SECONDS)
        try:
            async with asyncio.timeout(ANSWER_GRACE_SECONDS):
                await stream_answer(within, reporter, query, ctx, state, restarting=restarting)
        except TimeoutError:
            await reporter.answer_completed(ctx.agent_id, state.answer, 0)
            state.answered = True
    duration_ms = int((time.monotonic() - deadline.started) * 1000)
    await reporter.agent_completed(
        ctx.agent_id, state.answer, state.usage, duration_ms, state.iteration
    )
    state.stage = Stage.DONE
