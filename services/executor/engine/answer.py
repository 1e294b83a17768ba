"""Answer synthesis: a separate streamed call over the whole trace, tokens as they come."""

from __future__ import annotations

from services.executor.engine.state import LoopState, RunContext
from services.executor.engine.synthesis import echoes_prompt, synthesis_messages
from services.executor.log.partials import ReasoningRelay
from services.executor.log.prompts import PromptSettings, prompt_payload
from services.executor.log.reporter import RunReporter
from shuttle.envelope import ANSWER_RESTARTED
from shuttle.llm.protocol import LLM, ChatResult, LLMError


async def stream_answer(
    llm: LLM,
    reporter: RunReporter,
    query: str,
    ctx: RunContext,
    state: LoopState,
    *,
    restarting: bool = False,
) -> None:
    """The synthesised answer into `state.answer`; on any failure, the loop's own answer.
    `restarting`: a run taken over mid-answer says so before streaming it again."""
    if restarting:
        await reporter.status_update(ctx.agent_id, "Answer restarted", {"kind": ANSWER_RESTARTED})
    messages = synthesis_messages(
        query, state.steps, state.answer, ctx.history, ctx.task_context, state.follow_ups
    )
    await reporter.llm_prompt(
        ctx.agent_id, prompt_payload(PromptSettings.of(llm), messages, "answer")
    )
    stream = llm.stream_chat(
        messages, on_reasoning=ReasoningRelay(reporter, ctx.agent_id, "answer")
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
    answer = final.content if final is not None else (state.answer or "".join(parts))
    instructions = str(messages[0].get("content") or "")
    if state.answer.strip() and (not answer.strip() or echoes_prompt(answer, instructions)):
        # A synthesis that says nothing, or gives its prompt back, is no answer: the loop's
        # own stands.
        answer = state.answer
    tokens = final.usage.output_tokens if final is not None else 0
    await reporter.answer_completed(ctx.agent_id, answer, tokens)
    state.answer = answer
    state.answered = True
    if final is not None:
        await reporter.llm_output(ctx.agent_id, final, phase="answer")
        state.usage += final.usage
