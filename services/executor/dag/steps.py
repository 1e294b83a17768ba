"""One step of a plan as its own ReAct agent: its model, iteration cap, timeout and inbox."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass, replace
from typing import Any

from services.executor.dag.control import TeamControl
from services.executor.dag.events import Member, TeamReporter
from services.executor.dag.handoff import step_prompt
from services.executor.dag.ports import ModelPicker
from services.executor.dag.state import StepRecord
from services.executor.engine.loop import ReActAgent
from services.executor.engine.settings import AgentSettings
from services.executor.engine.state import LoopState, RunContext
from services.executor.log.emitter import EmitterFailed
from services.executor.log.reporter import RunReporter
from services.executor.policies.budget import TokenBudget
from services.executor.policies.control import RunCancelled
from services.executor.policies.interrupts import InterruptInbox
from services.executor.ports import ToolPort, ToolSelector
from services.executor.recovery.agent import AgentRecord
from services.executor.recovery.records import monotonic_since
from shuttle.llm.protocol import LLM, ROLES, LLMError
from shuttle.llm.retry_events import RetryReporter
from shuttle.plans import PlanStep
from shuttle.usage import TokenUsage


@dataclass(frozen=True)
class StepLimits:
    max_iterations: int = 15
    timeout_seconds: float = 600.0


def step_settings(settings: AgentSettings, limits: StepLimits) -> AgentSettings:
    """What every step's agent runs by: the run's settings, with the steps' iteration cap."""
    return replace(settings, max_iterations=limits.max_iterations)


def pick_model(models: ModelPicker | None, hint: str, default: LLM) -> LLM:
    """`model_hint` names a model of the registry, or a role; anything else: the default."""
    if models is None or not hint:
        return default
    named = models.by_name(hint)
    if named is not None:
        return named
    return models.for_role(hint) if hint in ROLES else default


def member_for(step: PlanStep, llm: LLM) -> Member:
    capabilities: tuple[str, ...]
    if step.tool_hint:
        role, capabilities = f"{step.tool_hint}-specialist", (step.tool_hint,)
    elif step.dependencies:
        role, capabilities = "integrator", ("combine_results", "reasoning")
    else:
        role, capabilities = "generalist", ("reasoning",)
    return Member(step.id, role, capabilities, llm.model)


class StepAgents:
    """Builds and runs the agent of each step; usage of running steps stays visible (a
    finished step's is its record's)."""

    def __init__(
        self,
        ctx: RunContext,
        query: str,
        *,
        llm: LLM,
        models: ModelPicker | None,
        tools: ToolPort,
        reporter: RunReporter,
        settings: AgentSettings,
        limits: StepLimits,
        control: TeamControl,
        inbox: InterruptInbox,
        selector: ToolSelector | None = None,
    ) -> None:
        self._ctx = ctx
        self._query = query
        self._llm = llm
        self._models = models
        self._tools = tools
        self._reporter = reporter
        self._team = TeamReporter(reporter)
        self._settings = settings
        self._limits = limits
        self._control = control
        self._inbox = inbox
        self._selector = selector
        self._running: dict[str, ReActAgent] = {}

    @property
    def usage(self) -> TokenUsage:
        """What the running steps have spent so far."""
        total = TokenUsage()
        for agent in self._running.values():
            total += agent.usage
        return total

    def model_for(self, step: PlanStep) -> LLM:
        return pick_model(self._models, step.model_hint, self._llm)

    async def run(
        self, step: PlanStep, inputs: Mapping[str, str], budget: TokenBudget
    ) -> StepRecord:
        """Runs `step` spending the team's `budget`, which every running step checks before
        each model call: once it is spent, each stops at its next call."""
        member = member_for(step, self.model_for(step))
        agent, inbox = self._agent(step, budget)
        prompt = step_prompt(self._query, step, inputs, self._inbox.received)
        ctx = replace(self._ctx, agent_id=step.id)
        return await self._run(
            step, agent, inbox, agent.run(prompt, ctx, role=member.role, subtask=step.task)
        )

    async def resume(self, step: PlanStep, record: AgentRecord, budget: TokenBudget) -> StepRecord:
        """Goes on with a step that had started before a takeover, from its log."""
        agent, inbox = self._agent(step, budget)
        # The follow-ups the step's own inbox had received and not yet taken.
        inbox.restore(self._inbox.received_since(record.started_seq), record.taken)
        ctx = replace(self._ctx, agent_id=step.id)
        catalog = await self._tools.list_tools(ctx.tenant_id)
        started = monotonic_since(record.started_at)
        return await self._run(
            step, agent, inbox, agent.resume(record.state, record.prompt, ctx, catalog, started)
        )

    def _agent(self, step: PlanStep, budget: TokenBudget) -> tuple[ReActAgent, InterruptInbox]:
        inbox = self._inbox.branch()
        agent = ReActAgent(
            self.model_for(step).with_observer(RetryReporter(self._reporter.emit, step.id)),
            self._tools,
            self._reporter,
            step_settings(self._settings, self._limits),
            selector=self._selector,
            control=self._control,
            inbox=inbox,
            stream_answer=False,
            budget=budget,
        )
        self._running[step.id] = agent
        return agent, inbox

    async def _run(
        self,
        step: PlanStep,
        agent: ReActAgent,
        inbox: InterruptInbox,
        running: Coroutine[Any, Any, LoopState],
    ) -> StepRecord:
        try:
            async with asyncio.timeout(self._limits.timeout_seconds):
                result = await running
        except TimeoutError:
            return await self._failed(
                step,
                agent,
                "TIMEOUT",
                f"step {step.id} timed out after {self._limits.timeout_seconds:g} s",
            )
        except LLMError as exc:
            return await self._failed(step, agent, "LLM_ERROR", f"step {step.id} failed: {exc}")
        except (RunCancelled, EmitterFailed):
            raise
        except Exception as exc:
            reason = f"step {step.id} failed: {type(exc).__name__}: {exc}"
            return await self._failed(step, agent, "AGENT_FAILED", reason)
        finally:
            self._inbox.release(inbox)
            self._running.pop(step.id, None)
        return StepRecord.of(step, result)

    async def _failed(
        self, step: PlanStep, agent: ReActAgent, error_type: str, reason: str
    ) -> StepRecord:
        await self._team.step_failed(step.id, error_type, reason)
        return StepRecord(step, reason, failed=True, usage=agent.usage)
