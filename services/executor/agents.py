"""What drives a run, by its mode: one ReAct agent (SIMPLE, STANDARD) or a team of them
(COMPLEX), started afresh or going on from the state a takeover rebuilt from the log."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from services.executor.commands.feed import RunReceiver
from services.executor.dag.control import TeamControl
from services.executor.dag.deadline import answer_team
from services.executor.dag.fallback import PlanFallback, report_fallback
from services.executor.dag.ports import DagPlanner, ModelPicker, PlanningFailed
from services.executor.dag.steps import StepAgents, StepLimits
from services.executor.dag.team import TeamRun, TeamSettings
from services.executor.engine.deadline import RunDeadline, answer_agent
from services.executor.engine.loop import ReActAgent
from services.executor.engine.settings import AgentSettings
from services.executor.engine.state import RunContext
from services.executor.log.reporter import RunReporter
from services.executor.ports import (
    ClaimedRun,
    Route,
    RunRequest,
    ToolDefinition,
    ToolPort,
    ToolSelector,
)
from services.executor.recovery.records import monotonic_since
from services.executor.recovery.run import RunRecovery, Tuning
from shuttle.llm.protocol import LLM
from shuttle.llm.retry_events import RetryReporter
from shuttle.metrics import RUN_ITERATIONS
from shuttle.usage import TokenUsage

SIMPLE_MAX_ITERATIONS = 5
SIMPLE_MAX_TOOLS = 3

Catalog = asyncio.Task[Sequence[ToolDefinition]]
"""A run's first listing of its tools, started with the run."""


@dataclass
class ActiveRun:
    """One run on this replica: started here (epoch 1 when leased), or taken over."""

    request: RunRequest
    llm: LLM
    catalog: Catalog
    epoch: int = 0
    claimed: ClaimedRun | None = None
    receiver: RunReceiver = field(default_factory=RunReceiver)
    usage: Callable[[], TokenUsage] = TokenUsage
    """What the engine has spent so far, for a cancelled run's report."""


@dataclass(frozen=True)
class Finished:
    answer: str
    usage: TokenUsage
    agents_used: int
    tools_invoked: int
    iterations: int


@dataclass(frozen=True)
class RunAgents:
    """Builds and runs a run's agent (or team) from the replica's parts."""

    tools: ToolPort
    settings: AgentSettings
    selector: ToolSelector | None = None
    planner: DagPlanner | None = None
    models: ModelPicker | None = None
    team: TeamSettings = field(default_factory=TeamSettings)
    step_limits: StepLimits = field(default_factory=StepLimits)

    def settings_for(self, request: RunRequest, mode: str) -> AgentSettings:
        settings = self.settings
        if request.budget_tokens > 0:
            settings = replace(settings, token_budget=request.budget_tokens)
        if mode == "SIMPLE":
            # Fewer iterations, and fewer tools when the catalog is large enough to be narrowed
            # (a smaller catalog is offered whole: a selection call would cost more than it saves).
            settings = replace(
                settings,
                max_iterations=min(settings.max_iterations, SIMPLE_MAX_ITERATIONS),
                tool_selection_max=min(settings.tool_selection_max, SIMPLE_MAX_TOOLS),
                # The router guessed: a task that needs more steps gets STANDARD's.
                escalate_max_iterations=settings.max_iterations,
            )
        return settings

    def tuning(self, request: RunRequest) -> Tuning:
        """What a takeover's fold needs to take the steps the run's agents took."""
        return Tuning(lambda mode: self.settings_for(request, mode), self.step_limits, self.team)

    async def drive(
        self,
        run: ActiveRun,
        route: Route,
        ctx: RunContext,
        reporter: RunReporter,
        recovery: RunRecovery | None,
        started: float,
    ) -> Finished:
        """The run's agent (or team), charged with what routing it spent; `started`: when
        the run started (monotonic clock), which its deadline counts from."""
        deadline = RunDeadline.from_start(started, self.settings.run_timeout_seconds)
        if route.mode == "COMPLEX":
            try:
                return await self._team(run, route.usage, ctx, reporter, recovery, deadline)
            except PlanFallback as fallback:
                route = await report_fallback(reporter, route, fallback)
        return await self._react(run, route, ctx, reporter, recovery, deadline)

    async def _react(
        self,
        run: ActiveRun,
        route: Route,
        ctx: RunContext,
        reporter: RunReporter,
        recovery: RunRecovery | None,
        deadline: RunDeadline,
    ) -> Finished:
        mode = route.mode
        llm = run.llm.with_observer(RetryReporter(reporter.emit, ctx.agent_id))
        agent = ReActAgent(
            llm.with_deadline(deadline.at),
            self.tools,
            reporter,
            self.settings_for(run.request, mode),
            selector=self.selector,
            control=run.receiver.control,
            inbox=run.receiver.interrupts,
        )
        run.usage = lambda: agent.usage
        catalog = await run.catalog
        record = recovery.agent if recovery is not None else None
        query = run.request.query if record is None else record.prompt
        if record is None:
            ran = await deadline.run(agent.run(query, ctx, catalog=catalog, spent=route.usage))
        else:
            started = monotonic_since(record.started_at)
            ran = await deadline.run(agent.resume(record.state, query, ctx, catalog, started))
        if ran is None:
            await deadline.report(reporter, ctx.agent_id)
            result = agent.state or agent.new_state(ctx.agent_id)
            await answer_agent(llm, reporter, query, ctx, result, deadline)
        else:
            result = ran
        RUN_ITERATIONS.observe(result.iteration)
        return Finished(result.answer, result.usage, 1, len(result.steps), result.iteration)

    async def _team(
        self,
        run: ActiveRun,
        routing: TokenUsage,
        ctx: RunContext,
        reporter: RunReporter,
        recovery: RunRecovery | None,
        deadline: RunDeadline,
    ) -> Finished:
        if self.planner is None:
            raise PlanningFailed("this executor has no planner for mode COMPLEX")
        settings = self.settings_for(run.request, "COMPLEX")
        control = TeamControl(run.receiver.control, reporter)
        agents = StepAgents(
            ctx,
            run.request.query,
            llm=run.llm,
            models=self.models,
            tools=self.tools,
            reporter=reporter,
            settings=settings,
            limits=self.step_limits,
            control=control,
            inbox=run.receiver.interrupts,
            selector=self.selector,
        )
        team = TeamRun(
            run.request.query,
            ctx,
            planner=self.planner,
            agents=agents,
            llm=run.llm,
            reporter=reporter,
            control=control,
            inbox=run.receiver.interrupts,
            settings=self.team,
            token_budget=settings.token_budget,
            budget_warn_percent=settings.budget_warn_percent,
            state=recovery.team if recovery is not None else None,
            running=recovery.running if recovery is not None else None,
            started=started_at(recovery),
            may_fall_back=not run.request.mode,  # a mode the user forced is kept
        )
        if recovery is None:  # a team taken over folded it from WORKFLOW_STARTED
            team.state.own_usage += routing
            team.state.budget.charge(routing.total_tokens)
        run.usage = lambda: team.usage
        result = await deadline.run(team.run(list(await run.catalog)))
        if result is None:
            await deadline.report(reporter)
            answer = await answer_team(reporter, team.state)
            state = team.state
            return Finished(
                answer,
                team.usage,
                sum(1 for o in state.outcomes if o.ran),
                sum(o.tool_calls for o in state.outcomes),
                state.round,
            )
        return Finished(
            result.answer, result.usage, result.agents_used, result.tools_invoked, result.rounds
        )


def started_at(recovery: RunRecovery | None) -> float | None:
    """When a run taken over started (monotonic clock), if its log says."""
    if recovery is None or recovery.started_at is None:
        return None
    return monotonic_since(recovery.started_at)
