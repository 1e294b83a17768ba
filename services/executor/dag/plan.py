"""A round's plan as the executor runs it, checked before any step starts."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from graphlib import CycleError, TopologicalSorter

from shuttle.usage import TokenUsage

RESERVED_IDS = frozenset({"user"})
"""`user` marks a user's follow-up on the log (MESSAGE_RECEIVED.from); no step may take it."""


class ScheduleError(ValueError):
    """The plan cannot be run (unknown dependency, duplicate id, cycle); says which step."""


@dataclass(frozen=True)
class Step:
    id: str
    task: str
    dependencies: tuple[str, ...] = ()
    tool_hint: str = ""
    model_hint: str = ""


@dataclass(frozen=True)
class PlannedRound:
    steps: tuple[Step, ...]
    usage: TokenUsage
    repairs: tuple[str, ...] = ()


def check_schedule(steps: Sequence[Step]) -> None:
    """Raise ScheduleError when the steps cannot all run: the planner checks its plans too,
    but the executor runs only what it has checked itself."""
    if not steps:
        raise ScheduleError("the plan has no steps")
    ids: set[str] = set()
    for step in steps:
        if not step.id.strip():
            raise ScheduleError(f"a step has no id (task: {step.task[:60]!r})")
        if step.id in ids:
            raise ScheduleError(f"step id {step.id!r} is used twice")
        if not step.task.strip():
            raise ScheduleError(f"step {step.id!r} has no task")
        ids.add(step.id)
    for step in steps:
        for dep in step.dependencies:
            if dep not in ids:
                raise ScheduleError(f"step {step.id!r} depends on unknown step {dep!r}")
    try:
        TopologicalSorter({s.id: s.dependencies for s in steps}).prepare()
    except CycleError as exc:
        cycle = " → ".join(str(node) for node in reversed(exc.args[1]))
        raise ScheduleError(f"the steps depend on each other in a cycle: {cycle}") from None


def qualify(steps: Sequence[Step], round_number: int) -> tuple[Step, ...]:
    """Give later rounds' steps ids of their own (`r2-s1`), so that every agent_id on the log
    names one step; rename ids that would pass for the user."""
    prefix = f"r{round_number}-" if round_number > 1 else ""

    def name(step_id: str) -> str:
        qualified = prefix + step_id
        return f"{qualified}-step" if qualified in RESERVED_IDS else qualified

    return tuple(
        replace(s, id=name(s.id), dependencies=tuple(name(d) for d in s.dependencies))
        for s in steps
    )
