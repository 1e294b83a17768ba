"""The ReAct engine: a tool loop of non-streaming calls, then a streamed answer."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from services.executor.ports import ToolDefinition, ToolHost, ToolInvocation, ToolOutcome
from services.executor.reporter import RunReporter
from services.executor.synthesis import ToolStep, fallback_answer, synthesis_messages
from shuttle.llm.protocol import LLM, ChatResult, LLMError, Message, TokenUsage

SYSTEM_PROMPT = (
    "You are a capable assistant that solves the user's task step by step. "
    "Call the available tools when they help; never guess what a tool would return. "
    "When you have what you need, reply with your answer and no tool call."
)


@dataclass(frozen=True)
class AgentSettings:
    max_iterations: int = 50
    tool_timeout_seconds: float = 30.0


@dataclass(frozen=True)
class RunContext:
    workflow_id: str
    tenant_id: str
    agent_id: str = "agent-main"


@dataclass
class AgentResult:
    answer: str
    iterations: int
    usage: TokenUsage
    steps: list[ToolStep] = field(default_factory=list)
    duration_ms: int = 0


class ReActAgent:
    """One agent bound to one model for its whole run (native function-calling mode)."""

    def __init__(
        self,
        llm: LLM,
        tools: ToolHost,
        reporter: RunReporter,
        settings: AgentSettings | None = None,
    ) -> None:
        self._llm = llm
        self._tools = tools
        self._reporter = reporter
        self._settings = settings or AgentSettings()

    async def run(self, query: str, ctx: RunContext) -> AgentResult:
        started = time.monotonic()
        definitions = await self._tools.list_tools(ctx.tenant_id)
        await self._reporter.agent_started(
            ctx.agent_id, "assistant", query, [d.name for d in definitions]
        )
        result = await self._tool_loop(query, ctx, definitions)
        result.answer = await self._stream_answer(query, ctx, result)
        result.duration_ms = int((time.monotonic() - started) * 1000)
        await self._reporter.agent_completed(
            ctx.agent_id, result.answer, result.usage, result.duration_ms, result.iterations
        )
        return result

    async def _tool_loop(
        self, query: str, ctx: RunContext, definitions: Sequence[ToolDefinition]
    ) -> AgentResult:
        schemas = [d.as_openai_tool() for d in definitions]
        messages: list[Message] = [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": query},
        ]
        result = AgentResult(answer="", iterations=0, usage=TokenUsage())
        for iteration in range(1, self._settings.max_iterations + 1):
            result.iterations = iteration
            await self._reporter.thinking(ctx.agent_id, iteration, "start")
            response = await self._llm.chat(messages, schemas)
            result.usage += response.usage
            await self._reporter.llm_output(ctx.agent_id, response, phase="tool_loop")
            reasoning = response.content or response.reasoning_content
            next_action = "invoke_tool" if response.tool_calls else "final_answer"
            await self._reporter.thinking(ctx.agent_id, iteration, "done", reasoning, next_action)
            if not response.tool_calls:
                result.answer = response.content
                return result
            messages.append(_assistant_message(response))
            # All calls of one response run concurrently; their `tool` messages must follow
            # the assistant message directly, in the order the model asked for them.
            outcomes = await asyncio.gather(
                *(
                    self._run_tool(ctx, iteration, call.id, call.name, call.arguments)
                    for call in response.tool_calls
                )
            )
            for call, outcome in zip(response.tool_calls, outcomes, strict=True):
                result.steps.append(ToolStep(iteration, call.name, call.arguments, outcome))
                messages.append(
                    {"role": "tool", "tool_call_id": call.id, "content": outcome.observation}
                )
        result.answer = fallback_answer(result.steps)
        return result

    async def _run_tool(
        self, ctx: RunContext, iteration: int, call_id: str, name: str, arguments: str
    ) -> ToolOutcome:
        await self._reporter.tool_invoked(
            ctx.agent_id, iteration, call_id, name, arguments, self._settings.tool_timeout_seconds
        )
        outcome = await self._tools.execute(
            ToolInvocation(ctx.workflow_id, ctx.tenant_id, ctx.agent_id, call_id, name, arguments)
        )
        await self._reporter.tool_observation(ctx.agent_id, iteration, call_id, name, outcome)
        return outcome

    async def _stream_answer(self, query: str, ctx: RunContext, loop: AgentResult) -> str:
        """Stream the synthesized answer; on failure fall back to the loop's own answer."""
        stream = self._llm.stream_chat(synthesis_messages(query, loop.steps, loop.answer))
        parts: list[str] = []
        try:
            async for delta in stream:
                await self._reporter.answer_delta(ctx.agent_id, delta, len(parts))
                parts.append(delta)
            final: ChatResult | None = stream.result
        except LLMError as exc:
            await self._reporter.error(
                "LLM_ERROR", f"answer synthesis failed: {exc}", fatal=False, agent_id=ctx.agent_id
            )
            final = None
        answer = final.content if final is not None else (loop.answer or "".join(parts))
        tokens = final.usage.output_tokens if final is not None else 0
        await self._reporter.answer_completed(ctx.agent_id, answer, tokens)
        if final is not None:
            loop.usage += final.usage
            await self._reporter.llm_output(ctx.agent_id, final, phase="answer")
        return answer


def _assistant_message(response: ChatResult) -> Message:
    return {
        "role": "assistant",
        "content": response.content or None,
        "tool_calls": [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments},
            }
            for call in response.tool_calls
        ],
    }
