"""The ReAct loop: one short loop for both modes, consulting small policies at fixed points.

Each iteration: control checkpoint → context guard → non-streaming model call → budget →
the mode's decision → (interrupts, checklist) → checkpoint → tool batch → cycle warnings,
self-reflection, interrupts. Then one streamed answer synthesis over the whole trace.

The loop walks its state's stages (engine/state.py), so that it goes on from wherever a
state rebuilt from the log stands as readily as from the start.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence

from services.executor.engine import progress
from services.executor.engine.answer import stream_answer
from services.executor.engine.compaction import fit_context
from services.executor.engine.selection import select_tools
from services.executor.engine.settings import AgentSettings
from services.executor.engine.state import Injection, LoopState, RunContext, Stage
from services.executor.engine.tokens import estimate_entries, estimate_tools
from services.executor.engine.tool_runner import ToolRunner
from services.executor.log.prompts import PromptSettings, prompt_payload
from services.executor.log.reporter import RunReporter
from services.executor.policies.budget import TokenBudget, spend
from services.executor.policies.context_guard import ContextGuard
from services.executor.policies.control import Checkpoints, RunControl, until_cancelled
from services.executor.policies.interrupts import InterruptInbox
from services.executor.ports import ToolDefinition, ToolPort, ToolSelector
from shuttle.llm.protocol import (
    LLM,
    ChatResult,
    ContextOverflowError,
    FallbackNotice,
    FeatureUnsupported,
)
from shuttle.llm.retry_events import fallback_event
from shuttle.usage import TokenUsage


def context_budget(agent: ReActAgent) -> int:
    """The share of the model's own context window (models file), else the deployment's."""
    size = agent.llm.context_size
    settings = agent.settings
    return settings.context_budget if size is None else int(size * settings.context_ratio)


ANSWER_NEAR = frozenset({Stage.ACT, Stage.FINAL, Stage.ANSWER})
"""Stages from which the loop may end without another event: its answer may have begun."""


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
        self.state: LoopState | None = None

    @property
    def native_mode(self) -> bool:
        return self.settings.use_native_tools and self.llm.supports_tools

    @property
    def usage(self) -> TokenUsage:
        """Tokens spent so far, kept current so that a cancelled run can still report them."""
        return self.state.usage if self.state is not None else TokenUsage()

    def new_state(self, agent_id: str) -> LoopState:
        return progress.new_state(agent_id, self.native_mode, self.settings, self.shared_budget)

    async def run(
        self,
        query: str,
        ctx: RunContext,
        *,
        role: str = "assistant",
        subtask: str = "",
        catalog: Sequence[ToolDefinition] | None = None,
        spent: TokenUsage | None = None,
    ) -> LoopState:
        """`catalog` is the tools listed for the run already, if they were; `spent` what the
        run spent before its agent started (routing it), counted as the agent's own."""
        started = time.monotonic()
        if catalog is None:
            catalog = await self.tools.list_tools(ctx.tenant_id)
        state = self.state = self.new_state(ctx.agent_id)
        await self.reporter.agent_started(
            ctx.agent_id,
            role,
            subtask or query,
            [t.name for t in catalog],
            prompt=query if subtask and subtask != query else "",
            tool_mode="native" if state.native else "json",
        )
        if spent is not None:
            state.usage += spent
            await spend(state.budget, spent.total_tokens, self.reporter, ctx.agent_id)
        return await self.resume(state, query, ctx, catalog, started)

    async def resume(
        self,
        state: LoopState,
        query: str,
        ctx: RunContext,
        catalog: Sequence[ToolDefinition],
        started: float,
    ) -> LoopState:
        """Go on from `state` (just started, or rebuilt from the log after a takeover) to
        AGENT_COMPLETED; `started` is when the agent started (monotonic clock)."""
        self.state = state
        # Taken over with its loop over, or about to be with nothing more to say: its answer
        # may have been streamed in part already (deltas are not kept on the log).
        entered = (state.stage, state.iteration, len(state.conversation))
        if state.stage is Stage.SELECT:
            progress.begin(state, await self._select(query, ctx, list(catalog)), query, ctx)
        tools = progress.offered(catalog, state.tools)
        await _RunLoop(self, ctx, tools, state).run()
        restarting_answer = entered[0] in ANSWER_NEAR and entered[1:] == (
            state.iteration,
            len(state.conversation),
        )
        if state.stage is Stage.ANSWER:
            await self._answer(query, ctx, state, restarting_answer)
            duration_ms = int((time.monotonic() - started) * 1000)
            await self.reporter.agent_completed(
                ctx.agent_id, state.answer, state.usage, duration_ms, state.iteration
            )
            state.stage = Stage.DONE
        return state

    async def _answer(
        self, query: str, ctx: RunContext, state: LoopState, restarting: bool
    ) -> None:
        if not self.streams_answer or state.answered:
            return
        if state.budget_exceeded:
            await self.reporter.answer_completed(ctx.agent_id, state.answer, 0)
            state.answered = True
            return
        await self.control.checkpoint("answer", self.reporter)
        await stream_answer(self.llm, self.reporter, query, ctx, state, restarting=restarting)
        late = self.inbox.drain()
        if late is not None:
            # The user spoke while the answer was being written: it is written again, heeding
            # them, and clients drop the first one (answer_restarted).
            injection = progress.interrupt(late)
            await report_injection(self.reporter, ctx.agent_id, injection)
            progress.add(state, injection)
            await stream_answer(self.llm, self.reporter, query, ctx, state, restarting=True)

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
        selected, fell_back, usage = await select_tools(
            self.selector, ctx.workflow_id, query, tools, self.settings.tool_selection_max
        )
        await self.reporter.status_update(
            ctx.agent_id,
            f"Offering {len(selected)} of {len(tools)} tools",
            {
                "phase": "tools_selected",
                "selected": [t.name for t in selected],
                "fell_back": fell_back,
                "usage": usage.as_payload(),
                "cost_usd": usage.cost_usd,
            },
        )
        # The selection call is the run's as much as the loop's calls are (a takeover reads
        # it back from the event above).
        assert self.state is not None
        self.state.usage += usage
        await spend(self.state.budget, usage.total_tokens, self.reporter, ctx.agent_id)
        return selected


class _RunLoop:
    """The loop over one agent's state; the policies it consults are the state's."""

    def __init__(
        self, agent: ReActAgent, ctx: RunContext, tools: Sequence[ToolDefinition], state: LoopState
    ) -> None:
        settings = agent.settings
        self.agent = agent
        self.reporter = agent.reporter
        self.ctx = ctx
        self.state = state
        self.mode = progress.mode_of(state)
        self.tools = tools
        self.schemas = self.mode.tool_schemas(tools)
        self.runner = ToolRunner(
            agent.tools, agent.reporter, ctx, [t.name for t in tools], settings.tool_timeout_seconds
        )
        self.guard = ContextGuard(agent.llm, context_budget(agent), settings.compact_keep_recent)
        self.prompt = PromptSettings.of(agent.llm)
        self.max_iterations = settings.max_iterations
        self.stages: dict[Stage, Callable[[], Awaitable[None]]] = {
            Stage.CALL: self._call,
            Stage.THINKING: self._think,
            Stage.DECIDED: self._decide,
            Stage.ACT: self._act,
            Stage.FINAL: self._final,
            Stage.TOOLS: self._tools,
            Stage.INJECT: self._inject_pending,
            Stage.INTERRUPTS: self._interrupts,
        }

    async def run(self) -> None:
        """Until the loop is over (stage ANSWER)."""
        while (step := self.stages.get(self.state.stage)) is not None:
            await step()

    async def _call(self) -> None:
        state = self.state
        await self.agent.control.checkpoint("llm_call", self.reporter)
        if state.escalated and not state.escalation_reported:
            state.escalation_reported = True
            await self.reporter.status_update(
                self.ctx.agent_id,
                "Escalated to STANDARD: the task needs more steps than SIMPLE allows",
                {"kind": progress.ESCALATED, "max_iterations": state.escalate_to},
            )
        if not state.budget.exhausted:
            await self._fit_context()
        if state.budget.exhausted:
            progress.end_over_budget(state, None)
            return
        await self.reporter.thinking(self.ctx.agent_id, state.iteration, "start")
        state.stage = Stage.THINKING

    async def _think(self) -> None:
        state = self.state
        try:
            response = await self._chat()
        except FeatureUnsupported as refused:
            if refused.feature != "tools" or not state.native:
                raise
            await self._to_json_mode(str(refused))
            return  # the same call again, with JSON actions
        except ContextOverflowError:
            # Our estimate said it fits, the provider says not: compact hard, and try once
            # more (a second overflow is fatal).
            await self._fit_context(self._overflow_guard())
            response = await self._chat()
        await self._account(response.usage)
        await self.reporter.llm_output(self.ctx.agent_id, response, phase="tool_loop")
        state.response = response
        state.stage = Stage.DECIDED

    async def _chat(self) -> ChatResult:
        """The loop's model call, its prompt logged first."""
        messages = self.state.conversation.messages
        await self.reporter.llm_prompt(
            self.ctx.agent_id, prompt_payload(self.prompt, messages, "tool_loop")
        )
        schemas = [] if self.state.tools_withdrawn else self.schemas
        return await self.agent.llm.chat(messages, schemas)

    async def _decide(self) -> None:
        decision = progress.decision_of(self.state)
        await self.reporter.thinking(
            self.ctx.agent_id,
            self.state.iteration,
            "done",
            decision.reasoning,
            decision.next_action,
        )
        progress.settle(self.state, decision)

    async def _act(self) -> None:
        interrupted = await self._take_interrupts()
        progress.act(self.state, progress.decision_of(self.state), interrupted, self.max_iterations)

    async def _final(self) -> None:
        # A pending answer gives way to follow-ups that arrived meanwhile.
        state = self.state
        if await self._take_interrupts():
            progress.next_iteration(state, self.max_iterations)
            return
        checklist = state.checklist.before_final_answer(len(state.steps))
        if checklist:
            await self._inject(
                Injection("completion_check", checklist, {"tool_calls": len(state.steps)})
            )
            progress.next_iteration(state, self.max_iterations)
            return
        progress.final_answer(state, progress.decision_of(state))

    async def _tools(self) -> None:
        await self.agent.control.checkpoint("tool_batch", self.reporter)
        decision = progress.decision_of(self.state)
        batch = self.runner.run_batch(self.state.iteration, decision.calls, self.state)
        await until_cancelled(self.agent.control, "tool_batch", batch)
        progress.finish_batch(self.state, decision)

    async def _inject_pending(self) -> None:
        while self.state.injections:
            await self._report(self.state.injections[0])
            progress.made(self.state)
        progress.after_injections(self.state, self.max_iterations)

    async def _interrupts(self) -> None:
        await self._take_interrupts()
        progress.next_iteration(self.state, self.max_iterations)

    async def _to_json_mode(self, why: str) -> None:
        llm = self.agent.llm
        notice = FallbackNotice(llm.model, "tools", "json_mode", why)
        await self.reporter.emit(fallback_event(notice, self.ctx.agent_id))
        progress.to_json_mode(self.state, self.tools, self.ctx)
        self.mode = progress.mode_of(self.state)
        self.schemas = self.mode.tool_schemas(self.tools)

    async def _account(self, usage: TokenUsage) -> None:
        self.state.usage += usage
        await spend(self.state.budget, usage.total_tokens, self.reporter, self.ctx.agent_id)

    def _overflow_guard(self) -> ContextGuard:
        """A guard whose budget is half of what the provider just refused."""
        size = estimate_entries(self.state.conversation.entries, estimate_tools(self.schemas))
        budget = min(context_budget(self.agent), size // 2)
        return ContextGuard(self.agent.llm, budget, self.agent.settings.compact_keep_recent)

    async def _fit_context(self, guard: ContextGuard | None = None) -> None:
        await fit_context(
            guard or self.guard,
            self.state,
            self.schemas,
            self.reporter,
            self.ctx.agent_id,
            self.prompt,
            self._account,
        )

    async def _take_interrupts(self) -> bool:
        follow_ups = self.agent.inbox.drain()
        if follow_ups is None:
            return False
        await self._inject(progress.interrupt(follow_ups))
        return True

    async def _inject(self, injection: Injection) -> None:
        await self._report(injection)
        progress.add(self.state, injection)

    async def _report(self, injection: Injection) -> None:
        await report_injection(self.reporter, self.ctx.agent_id, injection)


async def report_injection(reporter: RunReporter, agent_id: str, injection: Injection) -> None:
    """STATUS_UPDATE for a message the engine adds to the conversation (with its text, so a
    takeover can add it again)."""
    kind = injection.kind
    await reporter.status_update(
        agent_id,
        f"Injected {kind.replace('_', ' ')}",
        {"kind": kind, **injection.details, "text": injection.text},
    )
