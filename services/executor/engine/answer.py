"""Answer synthesis: a separate streamed call over the whole trace, tokens as they come."""

from __future__ import annotations

from services.executor.engine.state import AgentResult, RunContext
from services.executor.engine.synthesis import synthesis_messages
from services.executor.log.reporter import RunReporter
from shuttle.llm.protocol import LLM, ChatResult, LLMError


async def stream_answer(
    llm: LLM, reporter: RunReporter, query: str, ctx: RunContext, loop: AgentResult
) -> str:
    """The synthesised answer; on any failure, the loop's own answer."""
    stream = llm.stream_chat(
        synthesis_messages(query, loop.steps, loop.answer, ctx.history, ctx.task_context)
    )
    parts: list[str] = []
    final: ChatResult | None
    try:
        async for delta in stream:
            await reporter.answer_delta(ctx.agent_id, delta, len(parts))
            parts.append(delta)
        final = stream.result
    except LLMError as exc:
        await reporter.error(
            "LLM_ERROR", f"answer synthesis failed: {exc}", fatal=False, agent_id=ctx.agent_id
        )
        final = None
    answer = final.content if final is not None else (loop.answer or "".join(parts))
    tokens = final.usage.output_tokens if final is not None else 0
    await reporter.answer_completed(ctx.agent_id, answer, tokens)
    if final is not None:
        loop.usage += final.usage
        await reporter.llm_output(ctx.agent_id, final, phase="answer")
    return answer
