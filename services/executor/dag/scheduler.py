"""One round of a plan: each step starts as soon as its dependencies have finished, at most
`max_parallel` at a time; a failed step fails its dependents; cancel stops every step.

A round taken over part-way starts from the steps over already (`done`), and starts again
the steps it had announced (`announced`) without announcing them twice."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Collection, Coroutine, Mapping, Sequence
from typing import Any

from services.executor.dag.control import TeamControl
from services.executor.dag.events import TeamReporter
from services.executor.dag.handoff import handed_over
from services.executor.dag.state import StepRecord
from services.executor.policies.control import RunCancelled
from shuttle.plans import PlanStep, check_plan

RunStep = Callable[[PlanStep, Mapping[str, str]], Coroutine[Any, Any, StepRecord]]
"""Runs one step given its dependencies' results (as handed over); never raises for a
failure of the step itself, only RunCancelled."""

Gate = Callable[[], str | None]
"""Why no further step may start (e.g. the budget is spent), or None."""

Over = Callable[[StepRecord], None]
"""Told of each step as it is over (ran, failed or skipped)."""


class RoundScheduler:
    def __init__(
        self,
        steps: Sequence[PlanStep],
        run_step: RunStep,
        team: TeamReporter,
        control: TeamControl,
        *,
        max_parallel: int = 5,
        gate: Gate | None = None,
        over: Over | None = None,
        done: Mapping[str, StepRecord] | None = None,
        announced: Collection[str] = (),
    ) -> None:
        check_plan(steps)
        self._steps = list(steps)
        self._run_step = run_step
        self._team = team
        self._control = control
        self._max_parallel = max(1, max_parallel)
        self._gate = gate or (lambda: None)
        self._over = over or (lambda _: None)
        self._outcomes: dict[str, StepRecord] = dict(done or {})
        self._announced = set(announced)
        self._running: dict[asyncio.Task[StepRecord], PlanStep] = {}

    @property
    def _parallel(self) -> bool:
        """Whether any two steps may run at once (anything but a single chain)."""
        if self._max_parallel == 1:
            return False
        roots = [s for s in self._steps if not s.dependencies]
        dependents: dict[str, int] = {}
        for step in self._steps:
            for dep in step.dependencies:
                dependents[dep] = dependents.get(dep, 0) + 1
        fan = any(len(s.dependencies) > 1 for s in self._steps) or any(
            n > 1 for n in dependents.values()
        )
        return len(roots) > 1 or fan

    async def run(self) -> list[StepRecord]:
        """Every step's outcome in plan order; raises RunCancelled when the run is cancelled."""
        watcher = asyncio.create_task(self._control.wait_cancelled())
        try:
            while True:
                await self._start_ready()
                if not self._running:
                    break
                done, _ = await asyncio.wait(
                    [*self._running, watcher], return_when=asyncio.FIRST_COMPLETED
                )
                if watcher in done:
                    raise RunCancelled("dag_step", watcher.result())
                for task in self._done_steps(done):
                    await self._finish(task)
        finally:
            watcher.cancel()
            await self._stop_all()
        return [self._outcomes[s.id] for s in self._steps]

    async def _start_ready(self) -> None:
        changed = True
        while changed:
            changed = False
            for step in self._pending():
                if not all(d in self._outcomes for d in step.dependencies):
                    continue
                failed = [d for d in step.dependencies if self._outcomes[d].failed]
                refusal = self._gate()
                if failed:
                    await self._skip(
                        step,
                        "DEPENDENCY_FAILED",
                        f"step {step.id} not run: it depends on failed step(s) {', '.join(failed)}",
                    )
                    changed = True
                elif refusal is not None:
                    await self._skip(step, "STEP_SKIPPED", f"step {step.id} not run: {refusal}")
                    changed = True
                elif len(self._running) < self._max_parallel:
                    await self._start(step)
                    changed = True
        await self._report_status()

    def _pending(self) -> list[PlanStep]:
        started = {s.id for s in self._running.values()}
        return [s for s in self._steps if s.id not in self._outcomes and s.id not in started]

    async def _start(self, step: PlanStep) -> None:
        results = {d: self._outcomes[d].result for d in step.dependencies}
        inputs = handed_over(step, results)
        if step.id in self._announced:
            # Started before a takeover: its agent goes on from its log (and its own
            # checkpoints hold it while the run is paused).
            self._launch(step, inputs)
            return
        await self._control.pause_point("dag_step")
        if step.dependencies:
            await self._team.dependency_satisfied(step.id, step.dependencies)
            for dep, content in inputs.items():
                await self._team.handoff(dep, step.id, content)
        self._launch(step, inputs)

    def _launch(self, step: PlanStep, inputs: Mapping[str, str]) -> None:
        task = asyncio.create_task(self._run_step(step, inputs), name=f"step:{step.id}")
        self._running[task] = step

    async def _skip(self, step: PlanStep, error_type: str, reason: str) -> None:
        self._set(StepRecord(step, reason, failed=True, ran=False))
        await self._team.step_failed(step.id, error_type, reason)

    def _set(self, outcome: StepRecord) -> None:
        self._outcomes[outcome.step.id] = outcome
        self._over(outcome)

    def _done_steps(self, done: set[asyncio.Task[Any]]) -> list[asyncio.Task[StepRecord]]:
        # In plan order, so that simultaneous completions are logged the same way every time.
        order = {s.id: i for i, s in enumerate(self._steps)}
        finished = [t for t in self._running if t in done]
        return sorted(finished, key=lambda t: order[self._running[t].id])

    async def _finish(self, task: asyncio.Task[StepRecord]) -> None:
        step = self._running.pop(task)
        outcome = task.result()  # RunCancelled from a step's checkpoint ends the round
        self._set(outcome)
        await self._team.progress(len(self._outcomes), len(self._steps), step.task)

    async def _report_status(self) -> None:
        active = len(self._running)
        remaining = len(self._steps) - len(self._outcomes)
        await self._team.status(
            active=active,
            idle=remaining - active,
            completed=len(self._outcomes),
            remaining=remaining,
            parallel=self._parallel,
        )

    async def _stop_all(self) -> None:
        for task in self._running:
            task.cancel()
        for task in list(self._running):
            with contextlib.suppress(asyncio.CancelledError, RunCancelled):
                await task
        self._running.clear()
