"""The kill points of the takeover matrix, and `run_point`, which drives one of them.

Each point arms its holds before the run starts, brings the run to the point (`reach`), and
after the kill lets it go on (`after_kill`): releases what it held, or answers what the run
waits for (an approval, a resume) once another executor has taken the run over.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

from tests.chaos.effect_provider import ProviderHold
from tests.chaos.harness import assert_clean, is_resumption, read_log, record_row, wait_until
from tests.chaos.scenario import Scenario
from tests.chaos.takeover import (
    LEASE_SECONDS,
    ChaosRun,
    Context,
    Kit,
    PointOutcome,
    TakeoverStack,
    final_answer,
    finish_and_check,
    frame,
    owner_pid,
    run_problems,
    seen,
    start_run,
    tag,
    wait_for_event,
    wait_for_resumption,
    workflow,
)
from tests.chaos.takeover_model import Hold

ANSWER_DELTAS_BEFORE_KILL = 4


class KillPoint:
    name = ""
    mode = "standard"
    description = ""

    def arm(self, kit: Kit, run: ChaosRun) -> None:
        """Set up the holds for `run`, before it starts."""

    async def reach(self, ctx: Context, run: ChaosRun) -> None:
        """Return once `run` is at the point."""

    async def after_kill(self, ctx: Context, run: ChaosRun, resumed: bool) -> None:
        """Let the run go on; `resumed`: its executor was the one killed."""

    async def drive_reference(self, ctx: Context, run: ChaosRun) -> None:
        """What the uninterrupted run needs from outside (an approval) to finish."""

    def problems(self, run: ChaosRun, log: Sequence[dict[str, Any]], resumed: bool) -> list[str]:
        return []


async def until_arrived(hold: Hold | ProviderHold, what: str) -> None:
    async def arrived() -> bool:
        if isinstance(hold, Hold):
            return hold.arrivals > 0
        return hold.arrived.is_set()

    await wait_until(arrived, what, timeout_seconds=180)


class ModelCall(KillPoint):
    """Killed while the model answers (the third call, after two tools took effect)."""

    name = "model-call"
    description = "during a model call"
    holds: dict[str, Hold]
    tool_results = 2
    kind = "other"

    def __init__(self) -> None:
        self.holds = {}

    def arm(self, kit: Kit, run: ChaosRun) -> None:
        self.holds[run.question] = kit.model.hold_call(run.question, self.tool_results, self.kind)

    async def reach(self, ctx: Context, run: ChaosRun) -> None:
        await until_arrived(self.holds[run.question], f"{run.question}: the model call is held")

    async def after_kill(self, ctx: Context, run: ChaosRun, resumed: bool) -> None:
        self.holds[run.question].release()


class DagStep(ModelCall):
    """A COMPLEX run killed in step c's model call, steps a and b done."""

    name = "dag-step"
    mode = "complex"
    description = "in a DAG step's model call"
    tool_results = 1
    kind = "c"


class ToolInFlight(KillPoint):
    """Killed between TOOL_INVOKED and TOOL_OBSERVATION, the tool still working; the tool
    finishes only once another executor has taken the run over (its repeat must wait)."""

    name = "tool-in-flight"
    description = "between TOOL_INVOKED and TOOL_OBSERVATION, the tool still working"

    def __init__(self) -> None:
        self.holds: dict[str, ProviderHold] = {}

    def arm(self, kit: Kit, run: ChaosRun) -> None:
        self.holds[run.question] = kit.provider.hold_before_effect(run.question)

    async def reach(self, ctx: Context, run: ChaosRun) -> None:
        await until_arrived(self.holds[run.question], f"{run.question}: the tool call is held")

    async def after_kill(self, ctx: Context, run: ChaosRun, resumed: bool) -> None:
        if resumed:
            await wait_for_resumption(run.watcher)
        self.holds[run.question].release()


class ToolRan(ToolInFlight):
    """Killed after the tool took effect, before its observation was appended."""

    name = "tool-ran"
    description = "after a tool took effect, before its observation was appended"

    def arm(self, kit: Kit, run: ChaosRun) -> None:
        self.holds[run.question] = kit.provider.hold_after_effect(run.question)

    async def after_kill(self, ctx: Context, run: ChaosRun, resumed: bool) -> None:
        self.holds[run.question].release()


class Synthesis(KillPoint):
    """Killed mid-answer, a few deltas out: the new owner restarts the answer."""

    name = "synthesis"
    description = "during answer synthesis, some deltas out"

    def __init__(self) -> None:
        self.holds: dict[str, Hold] = {}

    def arm(self, kit: Kit, run: ChaosRun) -> None:
        hold = kit.model.hold_answer(run.question, ANSWER_DELTAS_BEFORE_KILL)
        self.holds[run.question] = hold

    async def reach(self, ctx: Context, run: ChaosRun) -> None:
        async def deltas_out() -> bool:
            delivered = seen(run.watcher, "THREAD_MESSAGE_DELTA")
            return len(delivered) >= ANSWER_DELTAS_BEFORE_KILL

        await until_arrived(self.holds[run.question], f"{run.question}: the answer is held")
        await wait_until(deltas_out, f"{run.question}: the first deltas are out", 180)

    async def after_kill(self, ctx: Context, run: ChaosRun, resumed: bool) -> None:
        self.holds[run.question].release()

    def problems(self, run: ChaosRun, log: Sequence[dict[str, Any]], resumed: bool) -> list[str]:
        if not resumed:
            return []
        events = run.watcher.events
        restarts = [
            i
            for i, e in enumerate(events)
            if e["type"] == "STATUS_UPDATE" and e["payload"].get("kind") == "answer_restarted"
        ]
        resumptions = [i for i, e in enumerate(events) if is_resumption(e)]
        if len(restarts) != 1 or not resumptions or restarts[0] < resumptions[0]:
            return [f"answer_restarted at {restarts}, resumptions at {resumptions}"]
        before = [e for e in events[: resumptions[0]] if e["type"] == "THREAD_MESSAGE_DELTA"]
        after = [e for e in events[restarts[0] :] if e["type"] == "THREAD_MESSAGE_DELTA"]
        completed = [e for e in events[restarts[0] :] if e["type"] == "THREAD_MESSAGE_COMPLETED"]
        problems = []
        if len(before) < ANSWER_DELTAS_BEFORE_KILL:
            problems.append(f"only {len(before)} deltas before the kill")
        if [e["payload"]["index"] for e in after] != list(range(len(after))):
            problems.append(f"restarted deltas' indexes {[e['payload']['index'] for e in after]}")
        whole = "".join(str(e["payload"]["delta"]) for e in after)
        if len(completed) != 1 or completed[0]["payload"].get("content") != whole:
            problems.append(f"the restarted deltas make {whole!r}, completed {completed}")
        if whole != final_answer(log):
            problems.append(f"the restarted answer {whole!r} is not the run's result")
        return problems


class Paused(ModelCall):
    """Paused, then killed while paused; resumed through another gateway after the takeover."""

    name = "paused"
    description = "while paused (resumed through another gateway after the takeover)"

    async def reach(self, ctx: Context, run: ChaosRun) -> None:
        await super().reach(ctx, run)
        paused = await ctx.chaos.client.post(f"/api/v1/tasks/{run.workflow_id}/pause")
        assert paused.status_code == 202, paused.text
        self.holds[run.question].release()
        await wait_for_event(run.watcher, "the run is paused", "WORKFLOW_PAUSED")

    async def after_kill(self, ctx: Context, run: ChaosRun, resumed: bool) -> None:
        if resumed:
            await wait_for_resumption(run.watcher)
        answer = await ctx.other.post(f"/api/v1/tasks/{run.workflow_id}/resume")
        assert answer.status_code == 202, answer.text

    def problems(self, run: ChaosRun, log: Sequence[dict[str, Any]], resumed: bool) -> list[str]:
        if run.question not in self.holds:
            return []  # the uninterrupted run is never paused
        types = [e["type"] for e in log]
        if "WORKFLOW_PAUSED" not in types or "WORKFLOW_RESUMED" not in types:
            return [f"paused/resumed missing from {types}"]
        if types.index("WORKFLOW_PAUSED") > types.index("WORKFLOW_RESUMED"):
            return ["resumed before it paused"]
        return []


class Approval(KillPoint):
    """Killed while the run waits on a human approval; approved after the takeover."""

    name = "approval"
    description = "while waiting on an approval (approved after the takeover)"

    async def reach(self, ctx: Context, run: ChaosRun) -> None:
        await wait_for_event(run.watcher, "approval is requested", "APPROVAL_REQUESTED")
        (requested,) = seen(run.watcher, "APPROVAL_REQUESTED")
        run.notes["approval_id"] = requested["payload"]["approval_id"]

    async def after_kill(self, ctx: Context, run: ChaosRun, resumed: bool) -> None:
        if resumed:
            await wait_for_resumption(run.watcher)
        decided = await ctx.other.post(
            f"/api/v1/approvals/{run.notes['approval_id']}", json={"decision": "approved"}
        )
        assert decided.status_code == 202, decided.text

    async def drive_reference(self, ctx: Context, run: ChaosRun) -> None:
        await self.reach(ctx, run)
        await self.after_kill(ctx, run, resumed=False)

    def problems(self, run: ChaosRun, log: Sequence[dict[str, Any]], resumed: bool) -> list[str]:
        # The new owner's repeat joins the waiting call: one request, one decision.
        asked = [e for e in log if e["type"] == "APPROVAL_REQUESTED"]
        decided = [e["payload"].get("decision") for e in log if e["type"] == "APPROVAL_DECISION"]
        if len(asked) != 1 or decided != ["approved"]:
            return [f"{len(asked)} approval requests, decisions {decided}"]
        return []


POINTS: dict[str, type[KillPoint]] = {
    point.name: point
    for point in (ModelCall, ToolInFlight, ToolRan, Synthesis, Paused, Approval, DagStep)
}


async def reference_answer(ctx: Context, point: KillPoint, label: str) -> str | None:
    """The answer of the same script run without a fault, which passes every check a run
    taken over must pass (so the checks hold on a plain run)."""
    run = ChaosRun(f"{label} reference")
    reference = Scenario(ctx.chaos.client, ctx.chaos.channel)
    alone = Context(ctx.stack, ctx.kit, reference, ctx.other)
    await start_run(alone, run, point.mode, subscribers=1)
    await point.drive_reference(alone, run)
    audits = await reference.finish()
    assert_clean(audits)
    log = await read_log(ctx.chaos.channel, run.workflow_id)
    answer = final_answer(log)
    problems = run_problems(ctx.kit, ctx.stack, run, log, answer, resumed=False)
    assert problems + point.problems(run, log, resumed=False) == [], (run.workflow_id, problems)
    return answer


async def run_point(
    stack: TakeoverStack, kit: Kit, point: KillPoint, runs: int, subscribers: int
) -> PointOutcome:
    """Kill the owner of the first of `runs` runs at `point`; every run must still end as
    the uninterrupted run does."""
    label = tag(f"takeover {point.name}")
    async with frame(stack, kit) as ctx:
        reference = await reference_answer(ctx, point, label)
        chaos_runs = [ChaosRun(f"{label} run {n}.") for n in range(runs)]
        for run in chaos_runs:
            point.arm(kit, run)
        for run in chaos_runs:
            await start_run(ctx, run, point.mode, subscribers)
        await asyncio.gather(*(point.reach(ctx, run) for run in chaos_runs))
        for run in chaos_runs:
            run.owner = (await workflow(ctx.chaos.channel, run.workflow_id)).lease_owner
        victim = owner_pid(chaos_runs[0].owner)
        resumed = {run.workflow_id: owner_pid(run.owner) == victim for run in chaos_runs}
        killed_at = time.monotonic()
        await asyncio.to_thread(stack.kill_executor, victim)
        if stack.restarts_itself:
            # Only the restarted executor can take the run over: fail fast if none comes.
            await asyncio.to_thread(stack.revive)

        async def recovered() -> float:
            await wait_for_resumption(chaos_runs[0].watcher)
            return time.monotonic() - killed_at

        timer = asyncio.create_task(recovered())
        going_on = [
            asyncio.create_task(point.after_kill(ctx, run, resumed[run.workflow_id]))
            for run in chaos_runs
        ]
        try:
            await asyncio.gather(timer, *going_on)
        finally:
            for task in (timer, *going_on):
                task.cancel()  # the others, once one has failed
        recovery = timer.result()
        outcome = await finish_and_check(
            ctx, chaos_runs, resumed, reference, recovery, point.problems
        )
    await asyncio.to_thread(stack.revive)
    return outcome


def record_point(stack: TakeoverStack, point: KillPoint, outcome: PointOutcome, scale: str) -> None:
    record_row(
        f"takeover-{point.name}-{stack.name}",
        f"executor owning the run killed (-9) {point.description}; {stack.name} stack, "
        f"lease {LEASE_SECONDS:g} s",
        scale,
        outcome.audits,
        outcome.subscriptions,
        outcome.recovery_seconds,
        "kill to the resumed run's first event (ERROR_RECOVERY resumed) at a subscriber",
    )
