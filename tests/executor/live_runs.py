"""Runs driven as the run manager drives them, with their live state within reach: the replay
tests compare it with the state folded from the run's log.

An agent (or a team) runs on the real events, tools and planner services with a real
reporter; commands go through the real command desk and reach the run by the local path,
as on the replica that owns it. The scripted model's handler takes a copy of the agent's
state at each loop call (it is then waiting for the model, mutating nothing).
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from services.executor.adapters.events import GrpcWorkflowLog, read_log, run_sink
from services.executor.commands.desk import CommandDesk, ControlAction
from services.executor.commands.feed import RunReceiver
from services.executor.dag.control import TeamControl
from services.executor.dag.state import TeamSettings, TeamState
from services.executor.dag.steps import StepAgents, StepLimits
from services.executor.dag.team import TeamResult, TeamRun
from services.executor.engine.loop import ReActAgent
from services.executor.engine.settings import AgentSettings
from services.executor.engine.state import LoopState, RunContext
from services.executor.log.closing import close
from services.executor.log.emitter import EventEmitter
from services.executor.log.reporter import RunReporter
from services.executor.policies.context_guard import COMPACT_PROMPT
from services.executor.ports import Route
from services.executor.recovery.records import Recorded
from services.executor.recovery.run import RunRecovery, Tuning, fold_run
from shuttle.llm.openai_model import OpenAIModel
from tests.executor.conftest import TENANT, Backends
from tests.support.scripted_openai import Handler, Reply, ScriptedOpenAI
from tests.support.team_model import label


@dataclass
class LiveAgent:
    """One ReAct agent's run; `snapshots`: its state at each loop call."""

    backends: Backends
    settings: AgentSettings
    query: str
    workflow_id: str = ""
    agent: ReActAgent | None = None
    receiver: RunReceiver = field(default_factory=RunReceiver)
    snapshots: list[LoopState] = field(default_factory=list)
    loop: asyncio.AbstractEventLoop | None = None
    created: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def ctx(self) -> RunContext:
        return RunContext(self.workflow_id, TENANT)

    @property
    def desk(self) -> CommandDesk:
        return CommandDesk(
            GrpcWorkflowLog(self.backends.client), lambda _, cmd: self.receiver.deliver(cmd)
        )

    def observing(self, script: Handler) -> Handler:
        def handle(body: dict[str, Any]) -> Reply:
            first = str(body["messages"][0].get("content") or "")
            if not body.get("stream") and not first.startswith(COMPACT_PROMPT):
                assert self.agent is not None and self.agent.state is not None
                self.snapshots.append(copy.deepcopy(self.agent.state))
            return script(body)

        return handle

    def interrupt(self, *messages: str) -> Callable[[], None]:
        """For a script step's `during`: the user's follow-ups, sent from the model's thread."""

        def during() -> None:
            assert self.loop is not None
            for message in messages:
                asyncio.run_coroutine_threadsafe(
                    self.desk.interrupt(self.workflow_id, TENANT, message), self.loop
                ).result(30)

        return during

    def pause(self) -> Callable[[], None]:
        def during() -> None:
            assert self.loop is not None
            asyncio.run_coroutine_threadsafe(
                self.desk.control(self.workflow_id, TENANT, ControlAction.PAUSE), self.loop
            ).result(30)

        return during

    async def started(self) -> str:
        """The workflow's id, once the run has created it."""
        await self.created.wait()
        return self.workflow_id

    async def resume_once_paused(self) -> None:
        await self.started()
        await self.backends.first_event(self.workflow_id, lambda e: e["type"] == "WORKFLOW_PAUSED")
        await self.desk.control(self.workflow_id, TENANT, ControlAction.RESUME)

    async def run(self, server: ScriptedOpenAI, script: Handler) -> LoopState:
        """The run to its end (WORKFLOW_STARTED … STREAM_END); the agent's final state."""
        self.loop = asyncio.get_running_loop()
        client = self.backends.client
        self.workflow_id = await client.create_workflow(TENANT, query=self.query)
        self.created.set()
        server.set_handler(self.observing(script))
        llm = OpenAIModel(server.base_url, "test-key", "scripted-model", 30.0, 0)
        reporter = RunReporter(EventEmitter(run_sink(client, self.workflow_id, TENANT)))
        self.agent = ReActAgent(
            llm,
            self.backends.tools,
            reporter,
            self.settings,
            selector=self.backends.planner,
            control=self.receiver.control,
            inbox=self.receiver.interrupts,
        )
        await reporter.workflow_started(self.query, Route("STANDARD", 0.0), "")
        state = await self.agent.run(self.query, self.ctx)
        await reporter.workflow_completed(state.answer, 0, state.usage, 1, len(state.steps))
        await close(reporter, self.workflow_id)
        return state


async def recorded(backends: Backends, workflow_id: str) -> list[Recorded]:
    return await read_log(backends.client, workflow_id, TENANT)


async def folded(
    backends: Backends,
    events: list[Recorded],
    settings: AgentSettings,
    ctx: RunContext,
    **tuning: Any,
) -> RunRecovery:
    catalog = await backends.tools.list_tools(TENANT)
    return fold_run(events, ctx, catalog, Tuning(lambda _: settings, **tuning))


def through(events: list[Recorded], last: Recorded) -> list[Recorded]:
    return [e for e in events if e.seq <= last.seq]


def loop_calls(events: list[Recorded], agent_id: str = "agent-main") -> list[Recorded]:
    """The AGENT_THINKING{start} of each of an agent's loop calls."""
    return [
        e
        for e in events
        if e.type == "AGENT_THINKING" and e.agent_id == agent_id and e.get("status") == "start"
    ]


@dataclass
class LiveTeam:
    """One COMPLEX run's team; `reviews`: its state at each analysis call."""

    backends: Backends
    settings: AgentSettings
    query: str
    workflow_id: str = ""
    team: TeamRun | None = None
    receiver: RunReceiver = field(default_factory=RunReceiver)
    reviews: list[TeamState] = field(default_factory=list)
    loop: asyncio.AbstractEventLoop | None = None

    @property
    def ctx(self) -> RunContext:
        return RunContext(self.workflow_id, TENANT)

    def observing(self, script: Handler) -> Handler:
        def handle(body: dict[str, Any]) -> Reply:
            if label(body) == "analysis":
                assert self.team is not None
                self.reviews.append(copy.deepcopy(self.team.state))
            return script(body)

        return handle

    def interrupt(self, message: str, reply: Reply) -> Callable[[dict[str, Any]], Reply]:
        """A step's scripted reply that sends the user's follow-up first."""

        def send(_: dict[str, Any]) -> Reply:
            assert self.loop is not None
            desk = CommandDesk(
                GrpcWorkflowLog(self.backends.client), lambda _, cmd: self.receiver.deliver(cmd)
            )
            asyncio.run_coroutine_threadsafe(
                desk.interrupt(self.workflow_id, TENANT, message), self.loop
            ).result(30)
            return reply

        return send

    async def run(self, server: ScriptedOpenAI, script: Handler) -> TeamResult:
        self.loop = asyncio.get_running_loop()
        client = self.backends.client
        self.workflow_id = await client.create_workflow(TENANT, query=self.query)
        server.set_handler(self.observing(script))
        llm = OpenAIModel(server.base_url, "k", "scripted-model", 30.0, 0)
        reporter = RunReporter(EventEmitter(run_sink(client, self.workflow_id, TENANT)))
        control = TeamControl(self.receiver.control, reporter)
        inbox = self.receiver.interrupts
        agents = StepAgents(
            self.ctx,
            self.query,
            llm=llm,
            models=None,
            tools=self.backends.tools,
            reporter=reporter,
            settings=self.settings,
            limits=StepLimits(),
            control=control,
            inbox=inbox,
            selector=self.backends.planner,
        )
        self.team = TeamRun(
            self.query,
            self.ctx,
            planner=self.backends.planner,
            agents=agents,
            llm=llm,
            reporter=reporter,
            control=control,
            inbox=inbox,
            settings=TeamSettings(),
            token_budget=self.settings.token_budget,
            budget_warn_percent=self.settings.budget_warn_percent,
        )
        await reporter.workflow_started(self.query, Route("COMPLEX", 0.0), "")
        result = await self.team.run(await self.backends.tools.list_tools(TENANT))
        await reporter.workflow_completed(result.answer, 0, result.usage, 1, 0)
        await close(reporter, self.workflow_id)
        return result
