"""Runs in the background: create the workflow (or take one over), drive the agent, close
the log; on shutdown, hand the runs over to the other replicas."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from services.executor.agents import ActiveRun, Catalog, RunAgents, started_at
from services.executor.commands.feed import CommandFeed
from services.executor.dag.ports import DagPlanner, ModelPicker, PlanningFailed
from services.executor.dag.steps import StepLimits
from services.executor.dag.team import TeamSettings
from services.executor.engine.settings import AgentSettings
from services.executor.engine.state import RunContext
from services.executor.lease import LeaseKeeper, Leasing
from services.executor.log.closing import close, end_refused_log, fail
from services.executor.log.emitter import EmitterFailed, EventEmitter
from services.executor.log.reporter import RunReporter
from services.executor.policies.control import RunCancelled
from services.executor.ports import (
    ClaimedRun,
    EventSink,
    Route,
    Router,
    RunLog,
    RunRequest,
    ToolPort,
    ToolSelector,
    WorkflowRegistry,
)
from services.executor.recovery.run import RunRecovery
from services.executor.takeover import TakeoverPoller, recover
from shuttle.llm.protocol import LLM, LLMError
from shuttle.logs import current_workflow
from shuttle.metrics import RUNS_FINISHED, RUNS_STARTED
from shuttle.plans import PlanError
from shuttle.telemetry import background_context
from shuttle.workflow_log import LogCommand

log = logging.getLogger(__name__)


SinkFactory = Callable[[str, str, int], EventSink]
"""(workflow_id, tenant_id, lease_epoch) -> the sink appending to that workflow's log."""


# How long a run's opening events wait for its catalog: a listing takes milliseconds, and a
# tools service that hangs must not keep a run from showing it has started.
CATALOG_SETTLE_SECONDS = 1.0


@dataclass(frozen=True)
class EmitterSettings:
    batch_max: int = 256
    linger_seconds: float = 0.0


class RunsStopping(Exception):
    """This replica is handing its runs over: a new run belongs on another."""


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
        commands: CommandFeed | None = None,
        selector: ToolSelector | None = None,
        emitter: EmitterSettings | None = None,
        planner: DagPlanner | None = None,
        models: ModelPicker | None = None,
        team: TeamSettings | None = None,
        step_limits: StepLimits | None = None,
        leasing: Leasing | None = None,
        run_log: RunLog | None = None,
    ) -> None:
        """With `leasing` (and `run_log`, which a takeover reads) runs are leased, taken
        over from lost replicas (`start_takeovers`) and handed over on `shutdown`."""
        self._leasing = leasing
        self._run_log = run_log
        self._router = router
        self._models = models
        self._agents = RunAgents(
            tools,
            settings,
            selector=selector,
            planner=planner,
            models=models,
            team=team or TeamSettings(),
            step_limits=step_limits or StepLimits(),
        )
        self._registry = registry
        self._sinks = sinks
        self._tools = tools
        self._llm = llm
        self._commands = commands
        self._emitter = emitter or EmitterSettings()
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._runs: dict[str, ActiveRun] = {}
        self._poller: TakeoverPoller | None = None
        self._stopping = False
        self._handing_over = False
        self._superseded: set[asyncio.Task[None]] = set()
        """Runs of ours whose lease we claimed back at a later epoch (they are fenced)."""

    @property
    def active_runs(self) -> int:
        return len(self._tasks)

    def start_takeovers(self) -> None:
        """Claim the runs other replicas lost or handed over, every poll, from now on."""
        if self._leasing is None or self._run_log is None:
            raise ValueError("taking runs over needs leasing and the run log")
        self._poller = TakeoverPoller(self._leasing, self.take_over)
        self._poller.start()

    async def start(self, request: RunRequest) -> str:
        """The new run's workflow id; ValueError for a request no run can be made of,
        RunsStopping once this replica is handing its runs over."""
        if self._stopping:
            raise RunsStopping("this executor is stopping: start the run on another replica")
        if not request.query.strip():
            raise ValueError("query must not be empty")
        llm = self._model_for(request)
        # ListTools and CreateWorkflow do not depend on each other: asked at once, the run's
        # first model call waits for neither in turn.
        catalog = self._list_tools(request.tenant_id)
        leasing = self._leasing
        try:
            workflow_id = await self._registry.create(
                request,
                lease_owner=leasing.owner if leasing is not None else "",
                lease_seconds=leasing.ttl_seconds if leasing is not None else 0.0,
            )
        except BaseException:
            await _cancel(catalog)
            raise
        self._launch(workflow_id, ActiveRun(request, llm, catalog, epoch=1 if leasing else 0))
        return workflow_id

    def take_over(self, claimed: ClaimedRun) -> None:
        """Go on with a run claimed from another replica (see takeover.py)."""
        if self._stopping:
            return  # its lease lapses again, and another replica claims it
        ours = self._tasks.get(claimed.workflow_id)
        if ours is not None:
            # Our own run, whose lease lapsed while its renewals failed: claimed back at a
            # later epoch, it goes on from its log once the old one (fenced) has stopped.
            self._superseded.add(ours)
            ours.cancel()
            ours.add_done_callback(lambda old: self._supersede(old, claimed))
            return
        request = RunRequest.from_spec(claimed)
        try:
            llm = self._model_for(request)
        except ValueError:
            log.warning("the run's model is not configured here: using the default")
            llm = self._llm
        catalog = self._list_tools(request.tenant_id)
        run = ActiveRun(request, llm, catalog, epoch=claimed.epoch, claimed=claimed)
        self._launch(claimed.workflow_id, run)

    def _supersede(self, old: asyncio.Task[None], claimed: ClaimedRun) -> None:
        self._superseded.discard(old)
        self.take_over(claimed)

    def _list_tools(self, tenant_id: str) -> Catalog:
        # Neither the run's tasks nor their done callbacks keep the request's span alive (each
        # would otherwise hold a copy of the request's context for the whole run).
        catalog = asyncio.create_task(
            self._tools.list_tools(tenant_id), name="list-tools", context=background_context()
        )
        # Retrieved here too, so a run that ends before it lists its tools leaves no
        # "exception was never retrieved" behind.
        catalog.add_done_callback(_retrieve)
        return catalog

    def _launch(self, workflow_id: str, run: ActiveRun) -> None:
        self._runs[workflow_id] = run
        context = background_context()
        if self._commands is not None and run.claimed is None:
            self._commands.register(workflow_id, run.request.tenant_id, run.receiver)
        task = asyncio.create_task(
            self._execute(workflow_id, run), name=workflow_id, context=context
        )
        self._tasks[workflow_id] = task
        task.add_done_callback(lambda _: self._forget(workflow_id), context=context)

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
        run = self._runs.get(workflow_id)
        if run is not None:
            run.receiver.deliver(command)

    def _forget(self, workflow_id: str) -> None:
        self._tasks.pop(workflow_id, None)
        self._runs.pop(workflow_id, None)
        if self._commands is not None:
            self._commands.unregister(workflow_id)

    async def _recover(
        self, workflow_id: str, run: ActiveRun, ctx: RunContext, reporter: RunReporter
    ) -> RunRecovery | None:
        assert run.claimed is not None and self._leasing is not None
        assert self._run_log is not None
        recovery = await recover(
            run.claimed,
            ctx,
            reporter,
            run.receiver,
            run_log=self._run_log,
            catalog=await run.catalog,
            tuning=self._agents.tuning(run.request),
            leasing=self._leasing,
        )
        if self._commands is not None and recovery is not None:
            # Commands up to the log's end were read with it; the feed brings the rest.
            from_seq = recovery.last_seq + 1
            self._commands.register(workflow_id, run.request.tenant_id, run.receiver, from_seq)
        return recovery

    async def _execute(self, workflow_id: str, run: ActiveRun) -> None:
        request = run.request
        emitter = EventEmitter(
            self._sinks(workflow_id, request.tenant_id, run.epoch),
            batch_max=self._emitter.batch_max,
            linger_seconds=self._emitter.linger_seconds,
        )
        reporter = RunReporter(emitter)
        started = time.monotonic()
        ctx = RunContext(
            workflow_id, request.tenant_id, history=request.history, task_context=request.context
        )
        current_workflow.set(workflow_id)  # this task's log lines name the run
        RUNS_STARTED.inc()
        log.info("run started" if run.claimed is None else "run taken over")
        lease: LeaseKeeper | None = None
        if self._leasing is not None:
            lease = self._leasing.keeper(
                workflow_id, request.tenant_id, lambda: reporter.ended, run.epoch
            )
        try:
            if lease is not None:
                lease.start()
            recovery = None
            if run.claimed is not None:
                recovery = await self._recover(workflow_id, run, ctx, reporter)
                if recovery is None:
                    return
                started = started_at(recovery) or started
                if recovery.ended:
                    await close(reporter, workflow_id)
                    return
            route = recovery.route if recovery is not None else None
            if route is None:
                route = await self._route(workflow_id, request, started)
                # Whatever the listing answers (an error is raised to whoever awaits it), the
                # run's opening events then go in one Append rather than WORKFLOW_STARTED alone
                # while the agent waits for its catalog.
                await asyncio.wait({run.catalog}, timeout=CATALOG_SETTLE_SECONDS)
                await reporter.workflow_started(
                    request.query,
                    route,
                    request.session_id,
                    self._leasing.owner if self._leasing is not None else "",
                )
            result = await self._agents.drive(run, route, ctx, reporter, recovery, started)
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
                run.usage(),
            )
            RUNS_FINISHED.labels("cancelled").inc()
            log.info("run cancelled", extra={"checkpoint": cancelled.checkpoint})
            await close(reporter, workflow_id)
        except asyncio.CancelledError:
            if not self._stopped_quietly(lease):
                await fail(reporter, workflow_id, "SHUTDOWN", "the executor shut down mid-run")
                raise
        except LLMError as exc:
            await fail(reporter, workflow_id, "LLM_ERROR", str(exc))
        except PlanningFailed as exc:
            await fail(reporter, workflow_id, "PLANNING_FAILED", str(exc))
        except PlanError as exc:
            await fail(reporter, workflow_id, "INVALID_PLAN", str(exc))
        except EmitterFailed as lost:
            if lost.fenced:
                RUNS_FINISHED.labels("lost").inc()
                log.warning("run stopped: another executor took it over (%s)", lost.cause)
            else:
                log.exception("run lost its event log", extra={"workflow_id": workflow_id})
                if lost.refused:
                    await end_refused_log(reporter, lost)
        except Exception as exc:
            log.exception("run failed", extra={"workflow_id": workflow_id})
            await fail(reporter, workflow_id, "INTERNAL", f"{type(exc).__name__}: {exc}")
        finally:
            await _cancel(run.catalog)  # not taken when the run ended before its agent started
            if lease is not None:
                await lease.stop()
            with contextlib.suppress(EmitterFailed):
                await emitter.close()
            if lease is not None and self._handing_over and not reporter.ended:
                await lease.release()

    def _stopped_quietly(self, lease: LeaseKeeper | None) -> bool:
        """Whether a cancelled run stops without a word on its log: handed over on shutdown
        (another replica goes on with it), or its lease refused (it is someone else's)."""
        task = asyncio.current_task()
        if task is not None and task in self._superseded:
            log.warning("run stopped: claimed again at a later epoch")
            RUNS_FINISHED.labels("lost").inc()
        elif lease is not None and self._handing_over:
            log.info("run handed over")
            RUNS_FINISHED.labels("handed_over").inc()
        elif lease is not None and lease.lost is not None:
            log.warning("run stopped: its lease was refused (%s)", lease.lost)
            RUNS_FINISHED.labels("lost").inc()
        else:
            return False
        if task is not None:
            task.uncancel()
        return True

    async def _route(self, workflow_id: str, request: RunRequest, started: float) -> Route:
        if self._router is None:
            return Route(request.mode or "STANDARD", 0.0)
        # Routing counts against the run's deadline like everything after it.
        left = started + self._agents.settings.run_timeout_seconds - time.monotonic()
        return await self._router.route(
            workflow_id, request.query, request.mode, request.tenant_id, within_seconds=left
        )

    async def shutdown(self) -> None:
        """Hand every run over at once: stop claiming, stop each run where it stands
        (appending nothing more of its own), send what its emitter had queued, and release
        its lease so that another replica claims it at its next poll. Without leasing (no
        other replica could take them) the runs fail as SHUTDOWN."""
        self._stopping = True
        if self._poller is not None:
            await self._poller.stop()
        self._handing_over = self._leasing is not None
        pending = list(self._tasks.values())
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        if self._commands is not None:
            await self._commands.close()


def _retrieve(task: Catalog) -> None:
    if not task.cancelled():
        task.exception()


async def _cancel(task: Catalog) -> None:
    if not task.done():
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
