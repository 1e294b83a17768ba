"""A COMPLEX run's team folded from its log: the round and its plan, the steps over (their
records), the steps started (their agents' states), the review and the answer, moved by the
team's own steps (dag/state.py) as the events say."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from services.executor.dag import state as progress
from services.executor.dag.state import StepRecord, TeamSettings, TeamStage, TeamState
from services.executor.dag.synthesis import SYNTHESIS_AGENT
from services.executor.engine.settings import AgentSettings
from services.executor.engine.state import RunContext, Stage
from services.executor.policies.budget import TokenBudget
from services.executor.policies.interrupts import merged
from services.executor.ports import ToolDefinition
from services.executor.recovery.agent import AgentFold, AgentRecord
from services.executor.recovery.records import Recorded, RecoveryError, usage_of
from shuttle.plans import Analysis, PlanStep
from shuttle.usage import TokenUsage

SKIPPED = frozenset({"DEPENDENCY_FAILED", "STEP_SKIPPED"})
"""A step that never ran (its ERROR_OCCURRED carries `subtask_id`)."""
# Announcements of a step's start (before its AGENT_STARTED).
ANNOUNCING = frozenset({"DEPENDENCY_SATISFIED", "MESSAGE_RECEIVED"})


class TeamFold:
    def __init__(
        self,
        step_settings: AgentSettings,
        settings: TeamSettings,
        ctx: RunContext,
        catalog: Sequence[ToolDefinition],
        follow_ups: Callable[[], Sequence[tuple[int, str]]],
    ) -> None:
        """`follow_ups`: the user's follow-ups read so far, (seq, content) in log order."""
        self.state = TeamState(
            TokenBudget(step_settings.token_budget, step_settings.budget_warn_percent)
        )
        self.agents: dict[str, AgentFold] = {}
        """The round's steps that have started."""
        self.announced: set[str] = set()
        self.taken: set[int] = set()
        """The follow-ups the team's reviews took."""
        self._step_settings = step_settings
        self._settings = settings
        self._ctx = ctx
        self._catalog = catalog
        self._follow_ups = follow_ups

    @property
    def running(self) -> dict[str, AgentRecord]:
        """The round's steps started and not over, as their logs left them."""
        if self.state.stage is not TeamStage.STEPS:
            return {}
        over = self.state.round_outcomes
        return {i: fold.record for i, fold in self.agents.items() if i not in over}

    def apply(self, event: Recorded) -> None:
        agent = event.agent_id
        if event.type == "STATUS_UPDATE" and agent == "":
            self._status(event)
        elif event.type == "TEAM_RECRUITED":
            self._require(event, TeamStage.RECRUIT)
            self.state.recruited += int(event.get("team_size") or 0)
            self.state.stage = TeamStage.STEPS
        elif event.type == "TEAM_RETIRED":
            self.state.stage = TeamStage.DONE
        elif agent == SYNTHESIS_AGENT:
            self._synthesis(event)
        elif (step := self._step(agent)) is not None:
            self._step_event(event, step)

    def _status(self, event: Recorded) -> None:
        state = self.state
        phase = event.get("phase")
        if phase == "planning":
            self._require(event, TeamStage.PLAN)
            state.stage = TeamStage.PLANNING
        elif phase == "planned":
            self._require(event, TeamStage.PLANNING)
            self._charge(event)
            self.agents = {}
            self.announced = set()
            progress.planned(state, progress.plan_of(event.get("steps") or ()))
        elif phase == "analyzed":
            self._require(event, TeamStage.REVIEW)
            analysis = None
            if event.get("available"):
                usage = self._charge(event)
                analysis = Analysis(
                    bool(event.get("achieved")),
                    float(event.get("confidence") or 0.0),
                    str(event.get("answer") or ""),
                    str(event.get("reasoning") or ""),
                    usage,
                )
            seqs = {int(seq) for seq in event.get("follow_up_seqs") or ()}
            self.taken |= seqs
            taken = [(seq, text) for seq, text in self._follow_ups() if seq in seqs]
            progress.reviewed(state, analysis, merged(taken) if taken else None, self._settings)
        elif phase == "replanning":
            self._require(event, TeamStage.REPLAN)
            progress.replanned(state)

    def _synthesis(self, event: Recorded) -> None:
        state = self.state
        if event.type == "THREAD_MESSAGE_COMPLETED":
            self._require(event, TeamStage.ANSWER)
            state.answer = str(event.get("content") or "")
            state.answered = True
        elif event.type == "LLM_OUTPUT":
            state.own_usage += usage_of(event.payload)

    def _step(self, agent_id: str) -> PlanStep | None:
        if self.state.stage is not TeamStage.STEPS:
            return None
        return next((s for s in self.state.plan if s.id == agent_id), None)

    def _step_event(self, event: Recorded, step: PlanStep) -> None:
        if step.id in self.state.round_outcomes:
            return
        if event.type == "AGENT_STARTED":
            self.announced.add(step.id)
            self.agents[step.id] = AgentFold(
                event, self._step_settings, self._ctx, self._catalog, self.state.budget
            )
        elif event.type in ANNOUNCING and event.get("from") != "user":
            self.announced.add(step.id)
        elif event.type == "ERROR_OCCURRED" and event.get("subtask_id") == step.id:
            self._step_failed(event, step)
        elif step.id in self.agents:
            fold = self.agents[step.id]
            fold.apply(event)
            if fold.state.stage is Stage.DONE:
                progress.step_over(self.state, StepRecord.of(step, fold.state))

    def _step_failed(self, event: Recorded, step: PlanStep) -> None:
        reason = str(event.get("error_message") or "")
        if event.get("error_type") in SKIPPED:
            record = StepRecord(step, reason, failed=True, ran=False)
        else:
            fold = self.agents.get(step.id)
            usage = fold.state.usage if fold is not None else TokenUsage()
            record = StepRecord(step, reason, failed=True, usage=usage)
        progress.step_over(self.state, record)

    def _charge(self, event: Recorded) -> TokenUsage:
        usage = usage_of(event.payload)
        self.state.own_usage += usage
        self.state.budget.charge(usage.total_tokens)
        return usage

    def _require(self, event: Recorded, stage: TeamStage) -> None:
        if self.state.stage is not stage:
            raise RecoveryError(
                f"{event.type} (seq {event.seq}) does not follow from the team's stage "
                f"{self.state.stage}: stage {stage} was expected"
            )
