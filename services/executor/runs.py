"""Runs in the background: create the workflow, drive the agent, close the log."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from services.executor.commands.feed import CommandFeed, CommandSource, RunReceiver
from services.executor.dag.control import TeamControl
from services.executor.dag.ports import DagPlanner, ModelPicker, PlanningFailed
from services.executor.dag.steps import StepAgents, StepLimits
from services.executor.dag.team import TeamRun, TeamSettings
from services.executor.engine.loop import ReActAgent
from services.executor.engine.settings import AgentSettings
from services.executor.engine.state import RunContext
from services.executor.lease import LeaseKeeper, Leasing
from services.executor.log.closing import close, end_refused_log, fail
from services.executor.log.emitter import EmitterFailed, EventEmitter
from services.executor.log.reporter import RunReporter
from services.executor.policies.control import RunCancelled
from services.executor.ports import (
    EventSink,
    Route,
    Router,
    RunRequest,
    ToolDefinition,
    ToolPort,
    ToolSelector,
    WorkflowRegistry,
)
from shuttle.llm.protocol import LLM, LLMError
from shuttle.llm.retry_events import RetryReporter
from shuttle.logs import current_workflow
from shuttle.metrics import RUN_ITERATIONS, RUNS_FINISHED, RUNS_STARTED
from shuttle.plans import PlanError
from shuttle.telemetry import background_context
from shuttle.usage import TokenUsage
from shuttle.workflow_log import LogCommand

log = logging.getLogger(__name__)


SinkFactory = Callable[[str, str], EventSink]
"""(workflow_id, tenant_id) -> the sink appending to that workflow's log."""


# How long a run's opening events wait for its catalog: a listing takes milliseconds, and a
# tools service that hangs must not keep a run from showing it has started.
CATALOG_SETTLE_SECONDS = 1.0

Catalog = asyncio.Task[Sequence[ToolDefinition]]
"""A run's first listing of its tools, started with the run."""

SIMPLE_MAX_ITERATIONS = 5
SIMPLE_MAX_TOOLS = 3


@dataclass(frozen=True)
class Finished:
    answer: str
    usage: TokenUsage
    agents_used: int
    tools_invoked: int
    iterations: int


@dataclass(frozen=True)
class EmitterSettings:
    batch_max: int = 256
    linger_seconds: float = 0.0


class RunManager:
    """Starts runs as background tasks; any failure ends the log with ERROR_OCCURRED."""

    def __init__(
        self,
        registry: WorkflowRegistry,
        sinks: SinkFactory,
        tools: ToolPort,
        llm: LLM,
        settings: AgentSettings,
        router: Router | None = None,
        *,
        commands: CommandSource | None = None,
        selector: ToolSelector | None = None,
        emitter: EmitterSettings | None = None,
        planner: DagPlanner | None = None,
        models: ModelPicker | None = None,
        team: TeamSettings | None = None,
        step_limits: StepLimits | None = None,
        leasing: Leasing | None = None,
    ) -> None:
        self._leasing = leasing
        self._router = router
        self._planner = planner
        self._models = models
        self._team = team or TeamSettings()
        self._step_limits = step_limits or StepLimits()
        self._registry = registry
        self._sinks = sinks
        self._tools = tools
        self._llm = llm
        self._settings = settings
        self._commands = CommandFeed(commands) if commands is not None else None
        self._selector = selector
        self._emitter = emitter or EmitterSettings()
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._receivers: dict[str, RunReceiver] = {}

    @property
    def active_runs(self) -> int:
        return len(self._tasks)

    async def start(self, request: RunRequest) -> str:
        """The new run's workflow id; ValueError for a request no run can be made of."""
        if not request.query.strip():
            raise ValueError("query must not be empty")
        llm = self._model_for(request)
        # ListTools and CreateWorkflow do not depend on each other: asked at once, the run's
        # first model call waits for neither in turn. Neither the run's tasks nor their done
        # callbacks keep the request's span alive (each would otherwise hold a copy of the
        # request's context for the whole run).
        catalog = asyncio.create_task(
            self._tools.list_tools(request.tenant_id),
            name="list-tools",
            context=background_context(),
        )
        # Retrieved here too, so a run that ends before it lists its tools leaves no
        # "exception was never retrieved" behind.
        catalog.add_done_callback(_retrieve)
        try:
            workflow_id = await self._registry.create(request)
        except BaseException:
            await _cancel(catalog)
            raise
        receiver = self._receivers[workflow_id] = RunReceiver()
        context = background_context()
        if self._commands is not None:
            self._commands.register(workflow_id, request.tenant_id, receiver)
        task = asyncio.create_task(
            self._execute(workflow_id, request, llm, catalog), name=workflow_id, context=context
        )
        self._tasks[workflow_id] = task
        task.add_done_callback(lambda _: self._forget(workflow_id), context=context)
        return workflow_id

    def _model_for(self, request: RunRequest) -> LLM:
        """The model the request names, else the default."""
        if not request.model:
            return self._llm
        named = self._models.by_name(request.model) if self._models is not None else None
        if named is None:
            known = ", ".join(self._models.names) if self._models is not None else "none"
            raise ValueError(
                f"model {request.model!r} is not configured here (configured: {known}); "
                "leave it empty for the default"
            )
        return named

    def deliver(self, workflow_id: str, command: LogCommand) -> None:
        """Hand a command appended on this replica straight to its run, if it runs here."""
        receiver = self._receivers.get(workflow_id)
        if receiver is not None:
            receiver.deliver(command)

    def _forget(self, workflow_id: str) -> None:
        self._tasks.pop(workflow_id, None)
        self._receivers.pop(workflow_id, None)
        if self._commands is not None:
            self._commands.unregister(workflow_id)

    def _agent_settings(self, request: RunRequest, mode: str) -> AgentSettings:
        settings = self._settings
        if request.budget_tokens > 0:
            settings = replace(settings, token_budget=request.budget_tokens)
        if mode == "SIMPLE":
            # Fewer iterations, and fewer tools when the catalog is large enough to be narrowed
            # (a smaller catalog is offered whole: a selection call would cost more than it saves).
            settings = replace(
                settings,
                max_iterations=min(settings.max_iterations, SIMPLE_MAX_ITERATIONS),
                tool_selection_max=min(settings.tool_selection_max, SIMPLE_MAX_TOOLS),
            )
        return settings

    async def _run_react(
        self,
        request: RunRequest,
        llm: LLM,
        mode: str,
        ctx: RunContext,
        reporter: RunReporter,
        usage: list[Callable[[], TokenUsage]],
        catalog: Catalog,
    ) -> Finished:
        receiver = self._receivers[ctx.workflow_id]
        agent = ReActAgent(
            llm.with_observer(RetryReporter(reporter.emit, ctx.agent_id)),
            self._tools,
            reporter,
            self._agent_settings(request, mode),
            selector=self._selector,
            control=receiver.control,
            inbox=receiver.interrupts,
        )
        usage[0] = lambda: agent.usage
        result = await agent.run(request.query, ctx, catalog=await catalog)
        RUN_ITERATIONS.observe(result.iteration)
        return Finished(result.answer, result.usage, 1, len(result.steps), result.iteration)

    async def _run_team(
        self,
        request: RunRequest,
        llm: LLM,
        ctx: RunContext,
        reporter: RunReporter,
        usage: list[Callable[[], TokenUsage]],
        catalog: Catalog,
    ) -> Finished:
        if self._planner is None:
            raise PlanningFailed("this executor has no planner for mode COMPLEX")
        receiver = self._receivers[ctx.workflow_id]
        settings = self._agent_settings(request, "COMPLEX")
        control = TeamControl(receiver.control, reporter)
        agents = StepAgents(
            ctx,
            request.query,
            llm=llm,
            models=self._models,
            tools=self._tools,
            reporter=reporter,
            settings=settings,
            limits=self._step_limits,
            control=control,
            inbox=receiver.interrupts,
            selector=self._selector,
        )
        team = TeamRun(
            request.query,
            ctx,
            planner=self._planner,
            agents=agents,
            llm=llm,
            reporter=reporter,
            control=control,
            inbox=receiver.interrupts,
            settings=self._team,
            token_budget=settings.token_budget,
            budget_warn_percent=settings.budget_warn_percent,
        )
        usage[0] = lambda: team.usage
        result = await team.run(list(await catalog))
        return Finished(
            result.answer, result.usage, result.agents_used, result.tools_invoked, result.rounds
        )

    async def _execute(
        self, workflow_id: str, request: RunRequest, llm: LLM, catalog: Catalog
    ) -> None:
        emitter = EventEmitter(
            self._sinks(workflow_id, request.tenant_id),
            batch_max=self._emitter.batch_max,
            linger_seconds=self._emitter.linger_seconds,
        )
        reporter = RunReporter(emitter)
        started = time.monotonic()
        context = RunContext(
            workflow_id,
            request.tenant_id,
            history=request.history,
            task_context=request.context,
        )
        usage: list[Callable[[], TokenUsage]] = [TokenUsage]
        """What the engine has spent so far, for a cancelled run's report."""
        current_workflow.set(workflow_id)  # this task's log lines name the run
        RUNS_STARTED.inc()
        log.info("run started")
        lease: LeaseKeeper | None = None
        if self._leasing is not None:
            lease = self._leasing.keeper(workflow_id, request.tenant_id, lambda: reporter.ended)
        try:
            if lease is not None:
                lease.start()
            route = (
                await self._router.route(
                    workflow_id, request.query, request.mode, request.tenant_id
                )
                if self._router is not None
                else Route(request.mode or "STANDARD", 0.0)
            )
            # Whatever the listing answers (an error is raised to whoever awaits it), the
            # run's opening events then go in one Append rather than WORKFLOW_STARTED alone
            # while the agent waits for its catalog.
            await asyncio.wait({catalog}, timeout=CATALOG_SETTLE_SECONDS)
            await reporter.workflow_started(
                request.query, route.mode, request.session_id, route.estimated_complexity
            )
            if route.mode == "COMPLEX":
                result = await self._run_team(request, llm, context, reporter, usage, catalog)
            else:
                result = await self._run_react(
                    request, llm, route.mode, context, reporter, usage, catalog
                )
            await reporter.workflow_completed(
                result.answer,
                int((time.monotonic() - started) * 1000),
                result.usage,
                agents_used=result.agents_used,
                tools_invoked=result.tools_invoked,
            )
            RUNS_FINISHED.labels("completed").inc()
            log.info("run completed", extra={"iterations": result.iterations})
            await close(reporter, workflow_id)
        except RunCancelled as cancelled:
            await reporter.workflow_cancelled(
                cancelled.checkpoint,
                cancelled.reason,
                int((time.monotonic() - started) * 1000),
                usage[0](),
            )
            RUNS_FINISHED.labels("cancelled").inc()
            log.info("run cancelled", extra={"checkpoint": cancelled.checkpoint})
            await close(reporter, workflow_id)
        except asyncio.CancelledError:
            if lease is None or lease.lost is None:
                await fail(reporter, workflow_id, "SHUTDOWN", "the executor shut down mid-run")
                raise
            # The lease keeper cancelled the run: whoever took the lease has ended the log,
            # so there is nothing left to report.
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()
            RUNS_FINISHED.labels("lost").inc()
            log.warning("run stopped: its lease was refused (%s)", lease.lost)
        except LLMError as exc:
            await fail(reporter, workflow_id, "LLM_ERROR", str(exc))
        except PlanningFailed as exc:
            await fail(reporter, workflow_id, "PLANNING_FAILED", str(exc))
        except PlanError as exc:
            await fail(reporter, workflow_id, "INVALID_PLAN", str(exc))
        except EmitterFailed as lost:
            log.exception("run lost its event log", extra={"workflow_id": workflow_id})
            if lost.refused:
                await end_refused_log(reporter, lost)
        except Exception as exc:
            log.exception("run failed", extra={"workflow_id": workflow_id})
            await fail(reporter, workflow_id, "INTERNAL", f"{type(exc).__name__}: {exc}")
        finally:
            await _cancel(catalog)  # not taken when the run ended before its agent started
            if lease is not None:
                await lease.stop()
            with contextlib.suppress(EmitterFailed):
                await emitter.close()

    async def shutdown(self, grace_seconds: float) -> None:
        """Let runs finish within the grace period, then cancel the rest (their logs say so)."""
        pending = list(self._tasks.values())
        if pending:
            _, still_running = await asyncio.wait(pending, timeout=grace_seconds)
            for task in still_running:
                task.cancel()
            await asyncio.gather(*still_running, return_exceptions=True)
        if self._commands is not None:
            await self._commands.close()


def _retrieve(task: Catalog) -> None:
    if not task.cancelled():
        task.exception()


async def _cancel(task: Catalog) -> None:
    if not task.done():
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
