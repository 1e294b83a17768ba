"""A DAG plan's steps, their results and the verdict on them, as the planner makes them and
the executor runs them: the same types on both sides of PlannerService.Plan/AnalyzePlan,
and the one check of a plan's shape that both make."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from graphlib import CycleError, TopologicalSorter

from shuttle.usage import TokenUsage


class PlanError(ValueError):
    """The plan cannot be used; the message says which step and why."""


@dataclass(frozen=True)
class PlanStep:
    id: str
    task: str
    dependencies: tuple[str, ...] = ()
    tool_hint: str = ""
    model_hint: str = ""


@dataclass(frozen=True)
class StepResult:
    """What one executed step came to, as the plan's analysis reads it."""

    step_id: str
    task: str
    result: str
    failed: bool = False


@dataclass(frozen=True)
class Analysis:
    """Whether a round's results achieve the task, and the answer built from them."""

    achieved: bool
    confidence: float
    answer: str
    reasoning: str
    usage: TokenUsage = field(default_factory=TokenUsage)
    """What the analysis itself cost."""


def check_plan(steps: Sequence[PlanStep]) -> None:
    """Raise PlanError unless every step can run: each has an id of its own and a task, and
    the dependencies name steps of the plan without a cycle."""
    if not steps:
        raise PlanError("the plan has no steps")
    seen: dict[str, int] = {}
    for index, step in enumerate(steps):
        if not step.id.strip():
            raise PlanError(f"steps[{index}] has no id (task: {step.task[:60]!r})")
        if not step.task.strip():
            raise PlanError(f"step {step.id!r} has no task")
        if step.id in seen:
            raise PlanError(
                f"step id {step.id!r} is used by steps[{seen[step.id]}] and steps[{index}]"
            )
        seen[step.id] = index
    for step in steps:
        for dep in step.dependencies:
            if dep not in seen:
                raise PlanError(f"step {step.id!r} depends on unknown step {dep!r}")
    try:
        TopologicalSorter({s.id: s.dependencies for s in steps}).prepare()
    except CycleError as exc:
        cycle = " → ".join(str(node) for node in reversed(exc.args[1]))
        raise PlanError(f"the steps depend on each other in a cycle: {cycle}") from None
