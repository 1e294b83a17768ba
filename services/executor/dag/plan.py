"""A round's plan as the executor runs it: its steps, given ids unique across rounds."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from shuttle.plans import PlanStep
from shuttle.usage import TokenUsage

RESERVED_IDS = frozenset({"user"})
"""`user` marks a user's follow-up on the log (MESSAGE_RECEIVED.from); no step may take it."""


@dataclass(frozen=True)
class PlannedRound:
    steps: tuple[PlanStep, ...]
    usage: TokenUsage
    repairs: tuple[str, ...] = ()


def qualify(steps: Sequence[PlanStep], round_number: int) -> tuple[PlanStep, ...]:
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
