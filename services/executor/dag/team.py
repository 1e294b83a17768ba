"""A COMPLEX run: plan, run the team, analyse, replan (up to `max_rounds`), then one
streamed answer. Every step is a ReAct agent; the run's control, inbox and budget are shared."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from services.executor.dag.control import TeamControl
from services.executor.dag.events import TeamReporter
from services.executor.dag.plan import qualify
from services.executor.dag.ports import DagPlanner
from services.executor.dag.scheduler import RoundScheduler, StepRecord
from services.executor.dag.steps import StepAgents, member_for
from services.executor.dag.synthesis import (
    SYNTHESIS_AGENT,
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
from shuttle.llm.protocol import LLM
from shuttle.plans import Analysis, PlanStep, StepResult, check_plan
from shuttle.usage import TokenUsage


@dataclass(frozen=True)
class TeamSettings:
    max_parallel: int = 5
    max_rounds: int = 3
    confidence_threshold: float = 0.8
    """A round whose analysis is below this (and not achieved) is replanned."""


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
    ) -> None:
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
        self._budget = TokenBudget(token_budget, budget_warn_percent)
        """The team's one ledger: planning, analysis and every step's model calls charge it."""
        self._own_usage = TokenUsage()
        """Planning, analysis and synthesis; the steps' usage is the agents'."""
        self._outcomes: list[StepRecord] = []
        self._recruited = 0

    @property
    def usage(self) -> TokenUsage:
        return self._own_usage + self._agents.usage

    async def run(self, tools: Sequence[ToolDefinition]) -> TeamResult:
        started = time.monotonic()
        try:
            rounds, draft = await self._rounds(tools)
        except RunCancelled:
            await self._retire(started, "cancelled")
            raise
        except Exception:
            await self._retire(started, "failed")
            raise
        if self._budget.exhausted:
            # No more model calls: the answer is put together from what the steps had.
            answer = budget_team_answer(self._budget.budget, self._outcomes, draft)
            await self._reporter.answer_completed(SYNTHESIS_AGENT, answer, 0)
            await self._retire(started, "budget_exceeded")
        else:
            answer = await self._synthesise(draft)
            await self._retire(started, "task_completed")
        return TeamResult(
            answer=answer,
            usage=self.usage,
            agents_used=sum(1 for o in self._outcomes if o.ran),
            tools_invoked=sum(o.tool_calls for o in self._outcomes),
            rounds=rounds,
        )

    async def _synthesise(self, draft: str) -> str:
        messages = team_synthesis_messages(self._query, self._outcomes, draft, self._inbox.received)
        await self._control.pause_point("answer")
        answer, usage = await stream_team_answer(self._llm, self._reporter, messages, draft)
        self._own_usage += usage
        return answer

    async def _rounds(self, tools: Sequence[ToolDefinition]) -> tuple[int, str]:
        """Runs rounds until the analysis is confident; the rounds run and the best draft."""
        context = ""
        draft = ""
        for number in range(1, self._settings.max_rounds + 1):
            await self._control.pause_point("planning")
            steps = await self._plan(number, tools, context)
            if self._budget.exhausted:
                return number, draft
            await self._recruit(number, steps, [t.name for t in tools])
            scheduler = RoundScheduler(
                steps,
                self._run_step,
                self._team,
                self._control,
                max_parallel=self._settings.max_parallel,
                gate=self._budget.refusal,
            )
            self._outcomes.extend(await scheduler.run())
            if self._budget.exhausted:
                return number, draft
            await self._control.pause_point("analysis")
            analysis = await self._analyze()
            draft = analysis.answer if analysis is not None else draft
            if self._budget.exhausted:
                return number, draft
            follow_ups = self._inbox.drain()
            if self._done(analysis) and follow_ups is None:
                return number, draft
            if number == self._settings.max_rounds:
                return number, draft
            context = replan_context(
                self._outcomes, analysis, follow_ups.text if follow_ups else None
            )
            await self._reporter.status_update(
                "",
                f"Replanning (round {number + 1} of at most {self._settings.max_rounds})",
                {
                    "phase": "replanning",
                    "round": number + 1,
                    "achieved": analysis.achieved if analysis else False,
                    "confidence": analysis.confidence if analysis else 0.0,
                    "reasoning": analysis.reasoning if analysis else "",
                    "interrupted": follow_ups is not None,
                },
            )
        return self._settings.max_rounds, draft

    def _done(self, analysis: Analysis | None) -> bool:
        if analysis is None:
            return True  # nothing to judge by: the round's results stand
        return analysis.achieved or analysis.confidence >= self._settings.confidence_threshold

    async def _plan(
        self, number: int, tools: Sequence[ToolDefinition], context: str
    ) -> tuple[PlanStep, ...]:
        await self._reporter.status_update(
            "", f"Planning round {number}", {"phase": "planning", "round": number}
        )
        planned = await self._planner.plan(self._ctx.workflow_id, self._query, tools, context)
        await self._charge(planned.usage)
        steps = qualify(planned.steps, number)
        check_plan(steps)
        await self._reporter.status_update(
            "",
            f"Plan of round {number}: {len(steps)} steps",
            {
                "phase": "planned",
                "round": number,
                "steps": [
                    {
                        "id": s.id,
                        "task": s.task,
                        "dependencies": list(s.dependencies),
                        "tool_hint": s.tool_hint,
                        "model_hint": s.model_hint,
                    }
                    for s in steps
                ],
                "repairs": list(planned.repairs),
            },
        )
        return steps

    async def _recruit(self, number: int, steps: Sequence[PlanStep], tool_names: list[str]) -> None:
        members = [member_for(s, self._agents.model_for(s)) for s in steps]
        await self._team.recruited(members, number)
        for member in members:
            await self._team.role_assigned(member, tool_names)
        self._recruited += len(members)

    async def _run_step(self, step: PlanStep, inputs: Mapping[str, str]) -> StepRecord:
        return await self._agents.run(step, inputs, self._budget)

    async def _charge(self, usage: TokenUsage) -> None:
        """The team's own calls (planning, analysis) spend the budget the steps spend."""
        self._own_usage += usage
        await spend(self._budget, usage.total_tokens, self._reporter, "")

    async def _analyze(self) -> Analysis | None:
        results = [StepResult(o.step.id, o.step.task, o.result, o.failed) for o in self._outcomes]
        analysis = await self._planner.analyze(self._ctx.workflow_id, self._query, results)
        if analysis is not None:
            await self._charge(analysis.usage)
        return analysis

    async def _retire(self, started: float, reason: str) -> None:
        if self._recruited:
            duration_ms = int((time.monotonic() - started) * 1000)
            await self._team.retired(self._recruited, duration_ms, self.usage, reason)


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
