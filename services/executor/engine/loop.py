"""The ReAct loop: one short loop for both modes, consulting small policies at fixed points.

Each iteration: control checkpoint → context guard → non-streaming model call → budget →
the mode's decision → (interrupts, checklist) → checkpoint → tool batch → cycle warnings,
self-reflection, interrupts. Then one streamed answer synthesis over the whole trace.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from services.executor.engine.answer import stream_answer
from services.executor.engine.conversation import Conversation, context_note
from services.executor.engine.modes import Decision, JsonMode, Mode, NativeMode
from services.executor.engine.selection import select_tools
from services.executor.engine.settings import AgentSettings
from services.executor.engine.state import AgentResult, RunContext
from services.executor.engine.synthesis import ToolStep, budget_answer, fallback_answer
from services.executor.engine.tool_runner import ToolRunner
from services.executor.log.reporter import RunReporter
from services.executor.policies.budget import TokenBudget, spend
from services.executor.policies.checklist import CompletionChecklist
from services.executor.policies.context_guard import ContextGuard, Situation
from services.executor.policies.control import Checkpoints, RunControl
from services.executor.policies.cycles import CycleDetector
from services.executor.policies.interrupts import InterruptInbox
from services.executor.policies.reflection import SelfReflection
from services.executor.ports import ToolDefinition, ToolPort, ToolSelector
from shuttle.llm.protocol import LLM, ChatResult
from shuttle.usage import TokenUsage


class ReActAgent:
    """One agent bound to one model for its whole run: every loop call, compaction summary
    and the answer synthesis use the same `llm`."""

    def __init__(
        self,
        llm: LLM,
        tools: ToolPort,
        reporter: RunReporter,
        settings: AgentSettings,
        *,
        selector: ToolSelector | None = None,
        control: Checkpoints | None = None,
        inbox: InterruptInbox | None = None,
        stream_answer: bool = True,
        budget: TokenBudget | None = None,
    ) -> None:
        self.llm = llm
        self.tools = tools
        self.reporter = reporter
        self.settings = settings
        self.selector = selector
        self.control: Checkpoints = RunControl() if control is None else control
        self.streams_answer = stream_answer
        """False for an agent whose answer feeds others (a DAG step): no streamed synthesis."""
        self.inbox = InterruptInbox() if inbox is None else inbox
        self.shared_budget = budget
        """A budget other agents spend too (a team's); None: each run has its own."""
        self.usage = TokenUsage()
        """Tokens spent so far, kept current so that a cancelled run can still report them."""

    @property
    def native_mode(self) -> bool:
        return self.settings.use_native_tools and self.llm.supports_tools

    async def run(
        self,
        query: str,
        ctx: RunContext,
        *,
        role: str = "assistant",
        subtask: str = "",
        catalog: Sequence[ToolDefinition] | None = None,
    ) -> AgentResult:
        """`catalog` is the tools listed for the run already, if they were."""
        started = time.monotonic()
        if catalog is None:
            catalog = await self.tools.list_tools(ctx.tenant_id)
        tools = list(catalog)
        await self.reporter.agent_started(
            ctx.agent_id, role, subtask or query, [t.name for t in tools]
        )
        tools = await self._select(query, ctx, tools)
        result = await _RunLoop(self, query, ctx, tools).run()
        if result.budget_exceeded:
            if self.streams_answer:
                await self.reporter.answer_completed(ctx.agent_id, result.answer, 0)
        elif self.streams_answer:
            await self.control.checkpoint("answer", self.reporter)
            result.answer = await stream_answer(self.llm, self.reporter, query, ctx, result)
        result.duration_ms = int((time.monotonic() - started) * 1000)
        await self.reporter.agent_completed(
            ctx.agent_id, result.answer, result.usage, result.duration_ms, result.iterations
        )
        return result

    async def _select(
        self, query: str, ctx: RunContext, tools: list[ToolDefinition]
    ) -> list[ToolDefinition]:
        if len(tools) <= self.settings.tool_selection_threshold:
            return tools
        await self.reporter.status_update(
            ctx.agent_id,
            f"Selecting tools among {len(tools)}",
            {"phase": "selecting_tools", "total_tools": len(tools)},
        )
        selected, fell_back = await select_tools(
            self.selector, ctx.workflow_id, query, tools, self.settings.tool_selection_max
        )
        await self.reporter.status_update(
            ctx.agent_id,
            f"Offering {len(selected)} of {len(tools)} tools",
            {
                "phase": "tools_selected",
                "selected": [t.name for t in selected],
                "fell_back": fell_back,
            },
        )
        return selected


class _RunLoop:
    """The state of one run of the loop; the policies it consults are created per run."""

    def __init__(
        self, agent: ReActAgent, query: str, ctx: RunContext, tools: Sequence[ToolDefinition]
    ) -> None:
        settings = agent.settings
        self.agent = agent
        self.reporter = agent.reporter
        self.ctx = ctx
        self.mode: Mode = NativeMode() if agent.native_mode else JsonMode()
        self.schemas = self.mode.tool_schemas(tools)
        self.runner = ToolRunner(
            agent.tools, agent.reporter, ctx, [t.name for t in tools], settings.tool_timeout_seconds
        )
        self.conversation = Conversation()
        system = self.mode.system_prompt(tools) + context_note(ctx.task_context)
        self.conversation.add({"role": "system", "content": system})
        self.conversation.add_history(ctx.history)
        self.conversation.add_user(query, pinned=True)
        self.result = AgentResult(answer="", iterations=0, usage=TokenUsage())
        self.guard = ContextGuard(agent.llm, settings.context_budget, settings.compact_keep_recent)
        self.budget = agent.shared_budget or TokenBudget(
            settings.token_budget, settings.budget_warn_percent
        )
        self.reflection = SelfReflection(settings.reflection_interval)
        self.cycles = CycleDetector(settings.cycle_threshold)
        self.checklist = CompletionChecklist(
            settings.completion_check, settings.completion_check_min_tools
        )
        self.reformat_pending = False

    async def run(self) -> AgentResult:
        for iteration in range(1, self.agent.settings.max_iterations + 1):
            self.result.iterations = iteration
            if await self._iterate(iteration):
                return self.result
        self.result.answer = fallback_answer(self.result.steps)
        return self.result

    async def _iterate(self, iteration: int) -> bool:
        """One model call and what follows from it; True when the loop is over."""
        agent_id = self.ctx.agent_id
        await self.agent.control.checkpoint("llm_call", self.reporter)
        if not self.budget.exhausted:
            await self._fit_context()
        if self.budget.exhausted:
            return await self._end_over_budget(None)
        await self.reporter.thinking(agent_id, iteration, "start")
        response = await self.agent.llm.chat(self.conversation.messages, self.schemas)
        await self._account(response.usage)
        await self.reporter.llm_output(agent_id, response, phase="tool_loop")
        decision = self.mode.decide(response, agent_id, iteration)
        await self.reporter.thinking(
            agent_id, iteration, "done", decision.reasoning, decision.next_action
        )
        if self.budget.exhausted:
            # Spent by this call or, in a team, by another agent's meanwhile.
            return await self._end_over_budget(decision)
        if decision.parse_failed:
            return await self._parse_failed(decision, response)
        self.reformat_pending = False
        self.mode.record_assistant(self.conversation, response, decision)
        interrupted = self.mode.drains_after_assistant and await self._take_interrupts()
        if not decision.calls:
            return await self._final_answer(decision, interrupted)
        await self.agent.control.checkpoint("tool_batch", self.reporter)
        outcomes = await self.runner.run_batch(iteration, decision.calls)
        self.mode.record_results(self.conversation, decision.calls, outcomes)
        for call, outcome in zip(decision.calls, outcomes, strict=True):
            self.result.steps.append(ToolStep(iteration, call.name, call.arguments_json, outcome))
            warning = self.cycles.observe(call.name, call.arguments_json)
            if warning:
                await self._inject("cycle_warning", warning, tool_name=call.name)
        reflection = self.reflection.after_tool_calls(len(decision.calls))
        if reflection:
            await self._inject("self_reflection", reflection, tool_calls=len(self.result.steps))
        if not self.mode.drains_after_assistant:
            await self._take_interrupts()
        return False

    async def _final_answer(self, decision: Decision, interrupted: bool) -> bool:
        # A pending answer gives way to follow-ups that arrived meanwhile.
        if interrupted or (not self.mode.drains_after_assistant and await self._take_interrupts()):
            return False
        checklist = self.checklist.before_final_answer(len(self.result.steps))
        if checklist:
            await self._inject("completion_check", checklist, tool_calls=len(self.result.steps))
            return False
        self.result.answer = decision.answer
        return True

    async def _parse_failed(self, decision: Decision, response: ChatResult) -> bool:
        """JSON mode: one reformat request; a second unparsable reply is the answer as is."""
        if self.reformat_pending:
            self.result.answer = decision.answer
            return True
        self.reformat_pending = True
        self.mode.record_parse_failure(self.conversation, response)
        await self._take_interrupts()
        return False

    async def _end_over_budget(self, decision: Decision | None) -> bool:
        final = decision is not None and not decision.calls and not decision.parse_failed
        draft = decision.answer if decision is not None and final else ""
        self.result.budget_exceeded = True
        self.result.answer = budget_answer(self.result.steps, self.budget.budget, draft)
        return True

    async def _account(self, usage: TokenUsage) -> None:
        self.result.usage += usage
        self.agent.usage = self.result.usage
        await spend(self.budget, usage.total_tokens, self.reporter, self.ctx.agent_id)

    async def _fit_context(self) -> None:
        situation = Situation(
            json_mode=not self.agent.native_mode,
            tool_calls=len(self.result.steps),
            interrupted=self.result.interrupted,
        )
        compaction = await self.guard.fit(self.conversation, self.schemas, situation)
        if compaction is None:
            return
        if compaction.summary_call is not None:
            await self.reporter.llm_output(self.ctx.agent_id, compaction.summary_call, "compact")
            await self._account(compaction.summary_call.usage)
        await self.reporter.compacted(
            self.ctx.agent_id,
            compaction.method,
            compaction.original_messages,
            compaction.kept_messages,
            compaction.tokens_before,
            compaction.tokens_after,
        )

    async def _take_interrupts(self) -> bool:
        merged = self.agent.inbox.drain()
        if merged is None:
            return False
        self.result.interrupted = True
        await self._inject("interrupt", merged, pinned=True)
        return True

    async def _inject(
        self, kind: str, text: str, *, pinned: bool = False, **details: object
    ) -> None:
        self.conversation.add_user(text, pinned=pinned)
        await self.reporter.status_update(
            self.ctx.agent_id, f"Injected {kind.replace('_', ' ')}", {"kind": kind, **details}
        )
