"""One step of a plan as its own ReAct agent: its model, iteration cap, timeout and inbox."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, replace

from services.executor.dag.control import TeamControl
from services.executor.dag.events import Member, TeamReporter
from services.executor.dag.handoff import step_prompt
from services.executor.dag.ports import ModelPicker
from services.executor.dag.scheduler import StepRecord
from services.executor.engine.loop import ReActAgent
from services.executor.engine.settings import AgentSettings
from services.executor.engine.state import RunContext
from services.executor.log.emitter import EmitterFailed
from services.executor.log.reporter import RunReporter
from services.executor.policies.budget import TokenBudget
from services.executor.policies.control import RunCancelled
from services.executor.policies.interrupts import InterruptInbox
from services.executor.ports import ToolPort, ToolSelector
from shuttle.llm.protocol import LLM, ROLES, LLMError
from shuttle.llm.retry_events import RetryReporter
from shuttle.plans import PlanStep
from shuttle.usage import TokenUsage


@dataclass(frozen=True)
class StepLimits:
    max_iterations: int = 15
    timeout_seconds: float = 600.0


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
    """Builds and runs the agent of each step; usage of running steps stays visible."""

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
        self.finished_usage = TokenUsage()

    @property
    def usage(self) -> TokenUsage:
        total = self.finished_usage
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
        settings = replace(self._settings, max_iterations=self._limits.max_iterations)
        inbox = self._inbox.branch()
        agent = ReActAgent(
            self.model_for(step).with_observer(RetryReporter(self._reporter.emit, step.id)),
            self._tools,
            self._reporter,
            settings,
            selector=self._selector,
            control=self._control,
            inbox=inbox,
            stream_answer=False,
            budget=budget,
        )
        self._running[step.id] = agent
        prompt = step_prompt(self._query, step, inputs, self._inbox.received)
        ctx = replace(self._ctx, agent_id=step.id)
        try:
            async with asyncio.timeout(self._limits.timeout_seconds):
                result = await agent.run(prompt, ctx, role=member.role, subtask=step.task)
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
            self.finished_usage += agent.usage
        return StepRecord(
            step,
            result.answer,
            usage=result.usage,
            tool_calls=len(result.steps),
            cut_short=result.budget_exceeded,
        )

    async def _failed(
        self, step: PlanStep, agent: ReActAgent, error_type: str, reason: str
    ) -> StepRecord:
        await self._team.step_failed(step.id, error_type, reason)
        return StepRecord(step, reason, failed=True, usage=agent.usage)
