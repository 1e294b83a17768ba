"""A COMPLEX run: plan, run the team, analyse, replan (up to `max_rounds`), then one
streamed answer. Every step is a ReAct agent; the run's control, inbox and budget are shared.

The team walks its state's stages (dag/state.py), so that a team rebuilt from the log after
a takeover goes on from where it stood: its finished steps stand, its running ones resume.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass

from services.executor.dag import state as progress
from services.executor.dag.control import TeamControl
from services.executor.dag.events import TeamReporter
from services.executor.dag.fallback import PlanFallback, senseless_plan
from services.executor.dag.plan import qualify
from services.executor.dag.ports import DagPlanner, PlanningFailed
from services.executor.dag.scheduler import RoundScheduler
from services.executor.dag.state import StepRecord, TeamSettings, TeamStage, TeamState
from services.executor.dag.steps import StepAgents, member_for
from services.executor.dag.synthesis import (
    SYNTHESIS_AGENT,
    answer_without_synthesis,
    budget_team_answer,
    stream_team_answer,
    team_synthesis_messages,
)
from services.executor.engine.state import RunContext
from services.executor.log.reporter import RunReporter
from services.executor.policies.budget import TokenBudget, spend
from services.executor.policies.control import RunCancelled
from services.executor.policies.interrupts import InterruptInbox
from services.executor.ports import ToolDefinition
from services.executor.recovery.agent import AgentRecord
from shuttle.envelope import ANSWER_RESTARTED
from shuttle.llm.protocol import LLM
from shuttle.plans import Analysis, PlanStep, StepResult, check_plan
from shuttle.usage import TokenUsage

__all__ = ["TeamResult", "TeamRun", "TeamSettings"]

REVIEWER_AGENT = "reviewer"
"""Who says, after each round, what the review concluded and how sure it is."""


@dataclass(frozen=True)
class TeamResult:
    answer: str
    usage: TokenUsage
    agents_used: int
    tools_invoked: int
    rounds: int


class TeamRun:
    def __init__(
        self,
        query: str,
        ctx: RunContext,
        *,
        planner: DagPlanner,
        agents: StepAgents,
        llm: LLM,
        reporter: RunReporter,
        control: TeamControl,
        inbox: InterruptInbox,
        settings: TeamSettings,
        token_budget: int = 0,
        budget_warn_percent: float = 80.0,
        state: TeamState | None = None,
        running: Mapping[str, AgentRecord] | None = None,
        started: float | None = None,
        may_fall_back: bool = False,
    ) -> None:
        """`state`, `running` (the round's steps that had started, as their logs left them)
        and `started` (monotonic clock) for a team taken over. `may_fall_back`: a first plan
        that is not worth a team raises PlanFallback (dag/fallback.py)."""
        self._query = query
        self._ctx = ctx
        self._planner = planner
        self._agents = agents
        self._llm = llm
        self._reporter = reporter
        self._team = TeamReporter(reporter)
        self._control = control
        self._inbox = inbox
        self._settings = settings
        self._may_fall_back = may_fall_back
        self.state = state or TeamState(TokenBudget(token_budget, budget_warn_percent))
        self._running = dict(running or {})
        self._restarting_answer = self.state.stage is TeamStage.ANSWER
        self._started = time.monotonic() if started is None else started
        self._stages: dict[TeamStage, Callable[[Sequence[ToolDefinition]], Awaitable[None]]] = {
            TeamStage.PLAN: self._plan,
            TeamStage.PLANNING: self._planning,
            TeamStage.RECRUIT: self._recruit,
            TeamStage.STEPS: self._steps,
            TeamStage.REVIEW: self._review,
            TeamStage.REPLAN: self._replan,
        }

    @property
    def usage(self) -> TokenUsage:
        total = self.state.own_usage + self._agents.usage
        for outcome in (*self.state.outcomes, *self.state.round_outcomes.values()):
            total += outcome.usage
        return total

    async def run(self, tools: Sequence[ToolDefinition]) -> TeamResult:
        state = self.state
        try:
            while (stage := self._stages.get(state.stage)) is not None:
                await stage(tools)
        except RunCancelled:
            await self._retire("cancelled")
            raise
        except Exception:
            await self._retire("failed")
            raise
        if state.stage is TeamStage.ANSWER:
            await self._answer()
            await self._retire("budget_exceeded" if state.budget.exhausted else "task_completed")
            state.stage = TeamStage.DONE
        return TeamResult(
            answer=state.answer,
            usage=self.usage,
            agents_used=sum(1 for o in state.outcomes if o.ran),
            tools_invoked=sum(o.tool_calls for o in state.outcomes),
            rounds=state.round,
        )

    async def _answer(self) -> None:
        state = self.state
        if state.answered:
            return
        if state.budget.exhausted:
            # No more model calls: the answer is put together from what the steps had.
            state.answer = budget_team_answer(state.budget.budget, state.outcomes, state.draft)
            await self._reporter.answer_completed(SYNTHESIS_AGENT, state.answer, 0)
        else:
            messages = team_synthesis_messages(
                self._query, state.outcomes, state.draft, self._inbox.received
            )
            await self._control.pause_point("answer")
            if self._restarting_answer:
                await self._reporter.status_update(
                    SYNTHESIS_AGENT, "Answer restarted", {"kind": ANSWER_RESTARTED}
                )
            state.answer, usage = await stream_team_answer(
                self._llm,
                self._reporter,
                messages,
                answer_without_synthesis(state.outcomes, state.draft),
            )
            state.own_usage += usage
        state.answered = True

    async def _plan(self, tools: Sequence[ToolDefinition]) -> None:
        number = self.state.round
        await self._control.pause_point("planning")
        await self._reporter.status_update(
            "", f"Planning round {number}", {"phase": "planning", "round": number}
        )
        self.state.stage = TeamStage.PLANNING

    async def _planning(self, tools: Sequence[ToolDefinition]) -> None:
        state = self.state
        may_fall_back = self._may_fall_back and state.round == 1
        try:
            planned = await self._planner.plan(
                self._ctx.workflow_id, self._query, tools, state.context
            )
        except PlanningFailed as failed:
            if may_fall_back:
                raise PlanFallback(f"no usable plan ({failed})", TokenUsage()) from failed
            raise
        if may_fall_back and (reason := senseless_plan(planned.steps, self._query)):
            raise PlanFallback(reason, planned.usage)
        steps = qualify(planned.steps, state.round)
        check_plan(steps)
        await self._charge(planned.usage)
        await self._reporter.status_update(
            "",
            f"Plan of round {state.round}: {len(steps)} steps",
            {
                "phase": "planned",
                "round": state.round,
                "steps": progress.plan_payload(steps),
                "repairs": list(planned.repairs),
                "usage": planned.usage.as_payload(),
                "cost_usd": planned.usage.cost_usd,
            },
        )
        progress.planned(state, steps)

    async def _recruit(self, tools: Sequence[ToolDefinition]) -> None:
        steps = self.state.plan
        members = [member_for(s, self._agents.model_for(s)) for s in steps]
        await self._team.recruited(members, self.state.round)
        for member in members:
            await self._team.role_assigned(member, [t.name for t in tools])
        self.state.recruited += len(members)
        self.state.stage = TeamStage.STEPS

    async def _steps(self, tools: Sequence[ToolDefinition]) -> None:
        state = self.state
        scheduler = RoundScheduler(
            state.plan,
            self._run_step,
            self._team,
            self._control,
            max_parallel=self._settings.max_parallel,
            gate=state.budget.refusal,
            over=lambda outcome: progress.step_over(state, outcome),
            done=state.round_outcomes,
            announced=self._running,
        )
        await scheduler.run()

    async def _review(self, tools: Sequence[ToolDefinition]) -> None:
        state = self.state
        await self._control.pause_point("analysis")
        results = [StepResult(o.step.id, o.step.task, o.result, o.failed) for o in state.outcomes]
        analysis = await self._planner.analyze(self._ctx.workflow_id, self._query, results)
        if analysis is not None:
            await self._charge(analysis.usage)
            await self._reporter.thinking(
                REVIEWER_AGENT,
                state.round,
                "done",
                analysis.reasoning,
                "",
                confidence=analysis.confidence,
            )
        follow_ups = self._inbox.drain()
        await self._reporter.status_update(
            "",
            f"Round {state.round} reviewed",
            analyzed_payload(state.round, analysis, follow_ups.seqs if follow_ups else ()),
        )
        progress.reviewed(state, analysis, follow_ups, self._settings)

    async def _replan(self, tools: Sequence[ToolDefinition]) -> None:
        state = self.state
        analysis = state.analysis
        await self._reporter.status_update(
            "",
            f"Replanning (round {state.round + 1} of at most {self._settings.max_rounds})",
            {
                "phase": "replanning",
                "round": state.round + 1,
                "achieved": analysis.achieved if analysis else False,
                "confidence": analysis.confidence if analysis else 0.0,
                "reasoning": analysis.reasoning if analysis else "",
                "interrupted": state.follow_ups is not None,
            },
        )
        progress.replanned(state)

    async def _run_step(self, step: PlanStep, inputs: Mapping[str, str]) -> StepRecord:
        record = self._running.pop(step.id, None)
        if record is not None:
            return await self._agents.resume(step, record, self.state.budget)
        return await self._agents.run(step, inputs, self.state.budget)

    async def _charge(self, usage: TokenUsage) -> None:
        """The team's own calls (planning, analysis) spend the budget the steps spend."""
        self.state.own_usage += usage
        await spend(self.state.budget, usage.total_tokens, self._reporter, "")

    async def _retire(self, reason: str) -> None:
        if self.state.recruited:
            duration_ms = int((time.monotonic() - self._started) * 1000)
            await self._team.retired(self.state.recruited, duration_ms, self.usage, reason)


def analyzed_payload(
    round_number: int, analysis: Analysis | None, follow_up_seqs: Sequence[int]
) -> dict[str, object]:
    """STATUS_UPDATE{phase: analyzed}: the review whole (a team taken over reads its verdict
    and draft back), and the follow-ups it took."""
    payload: dict[str, object] = {
        "phase": "analyzed",
        "round": round_number,
        "follow_up_seqs": list(follow_up_seqs),
        "available": analysis is not None,
    }
    if analysis is not None:
        payload |= {
            "achieved": analysis.achieved,
            "confidence": analysis.confidence,
            "answer": analysis.answer,
            "reasoning": analysis.reasoning,
            "usage": analysis.usage.as_payload(),
            "cost_usd": analysis.usage.cost_usd,
        }
    return payload
