"""A team's state and the steps it takes without calling anything, shared by the live team
and the fold that rebuilds it from the log (as engine/state.py and progress.py are for one
agent): the round, its plan, what each step came to, the review, the answer."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from services.executor.engine.state import LoopState
from services.executor.policies.budget import TokenBudget
from services.executor.policies.interrupts import FollowUps
from shuttle.plans import Analysis, PlanStep
from shuttle.usage import TokenUsage


@dataclass(frozen=True)
class TeamSettings:
    max_parallel: int = 5
    max_rounds: int = 3
    confidence_threshold: float = 0.8
    """A round whose analysis is below this (and not achieved) is replanned."""


@dataclass
class StepRecord:
    """What became of one step of a round: its result, what it spent, whether it ran."""

    step: PlanStep
    result: str
    failed: bool = False
    usage: TokenUsage = field(default_factory=TokenUsage)
    tool_calls: int = 0
    ran: bool = True
    """False for a step that never started (a failed dependency, an exhausted budget)."""
    cut_short: bool = False
    """The team's budget ran out while the step ran: its result is what it had by then."""

    @classmethod
    def of(cls, step: PlanStep, agent: LoopState) -> StepRecord:
        """A step whose agent came to its answer."""
        return cls(
            step,
            agent.answer,
            usage=agent.usage,
            tool_calls=len(agent.steps),
            cut_short=agent.budget_exceeded,
        )


class TeamStage(StrEnum):
    PLAN = "plan"
    """Round `round` is to be planned (STATUS_UPDATE{phase: planning} next)."""
    PLANNING = "planning"
    """The planner is asked for the round's plan."""
    RECRUIT = "recruit"
    """The plan is out (phase planned); the team is recruited next."""
    STEPS = "steps"
    """The round's steps run."""
    REVIEW = "review"
    """The steps are done; the round is analysed (phase analyzed) next."""
    REPLAN = "replan"
    """The review wants another round (phase replanning next)."""
    ANSWER = "answer"
    """The rounds are over: the answer is made (unless `answered`), then the team retires."""
    DONE = "done"
    """TEAM_RETIRED is out."""


@dataclass
class TeamState:
    budget: TokenBudget
    """The team's one ledger: planning, analysis and every step's model calls charge it."""
    stage: TeamStage = TeamStage.PLAN
    round: int = 1
    context: str = ""
    """What the round's planner is told about the rounds before."""
    plan: tuple[PlanStep, ...] = ()
    round_outcomes: dict[str, StepRecord] = field(default_factory=dict)
    """The round's steps that are over, by id."""
    outcomes: list[StepRecord] = field(default_factory=list)
    """Every earlier round's steps, each round in plan order."""
    analysis: Analysis | None = None
    follow_ups: FollowUps | None = None
    """The user's follow-ups the latest review took."""
    draft: str = ""
    own_usage: TokenUsage = field(default_factory=TokenUsage)
    """Planning, analysis and synthesis; the steps' usage is their records'."""
    recruited: int = 0
    answer: str = ""
    answered: bool = False


def plan_payload(steps: Sequence[PlanStep]) -> list[dict[str, Any]]:
    return [
        {
            "id": s.id,
            "task": s.task,
            "dependencies": list(s.dependencies),
            "tool_hint": s.tool_hint,
            "model_hint": s.model_hint,
        }
        for s in steps
    ]


def plan_of(payload: Sequence[Mapping[str, Any]]) -> tuple[PlanStep, ...]:
    return tuple(
        PlanStep(
            str(s["id"]),
            str(s["task"]),
            tuple(str(d) for d in s.get("dependencies") or ()),
            str(s.get("tool_hint") or ""),
            str(s.get("model_hint") or ""),
        )
        for s in payload
    )


def planned(state: TeamState, steps: tuple[PlanStep, ...]) -> None:
    """The round's plan is out (its cost charged already)."""
    state.plan = steps
    state.round_outcomes = {}
    state.stage = TeamStage.ANSWER if state.budget.exhausted else TeamStage.RECRUIT


def step_over(state: TeamState, record: StepRecord) -> None:
    """One step of the round is over; the last one ends the round."""
    state.round_outcomes[record.step.id] = record
    if len(state.round_outcomes) < len(state.plan):
        return
    state.outcomes.extend(state.round_outcomes[s.id] for s in state.plan)
    state.round_outcomes = {}
    state.stage = TeamStage.ANSWER if state.budget.exhausted else TeamStage.REVIEW


def reviewed(
    state: TeamState,
    analysis: Analysis | None,
    follow_ups: FollowUps | None,
    settings: TeamSettings,
) -> None:
    """The round's analysis is out (its cost charged already): another round, or the answer."""
    state.analysis = analysis
    state.follow_ups = follow_ups
    if analysis is not None:
        state.draft = analysis.answer
    # Nothing to judge by: the round's results stand.
    done = analysis is None or (
        analysis.achieved or analysis.confidence >= settings.confidence_threshold
    )
    if (
        state.budget.exhausted
        or (done and follow_ups is None)
        or state.round == settings.max_rounds
    ):
        state.stage = TeamStage.ANSWER
    else:
        state.stage = TeamStage.REPLAN


def replanned(state: TeamState) -> None:
    """Round `round + 1` follows, told about the rounds so far."""
    follow_ups = state.follow_ups.text if state.follow_ups is not None else None
    state.context = replan_context(state.outcomes, state.analysis, follow_ups)
    state.round += 1
    state.stage = TeamStage.PLAN


def replan_context(
    outcomes: Sequence[StepRecord], analysis: Analysis | None, follow_ups: str | None
) -> str:
    """What the planner is told about the rounds so far."""
    lines = []
    for o in outcomes:
        status = "FAILED" if o.failed else "done"
        lines.append(f"- {o.step.id} ({status}): {o.step.task}\n  result: {o.result[:1_000]}")
    if analysis is not None:
        lines.append(
            f"Review: achieved={analysis.achieved}, confidence={analysis.confidence:.2f}. "
            f"{analysis.reasoning}"
        )
    if follow_ups:
        lines.append(follow_ups)
    return "\n".join(lines)
