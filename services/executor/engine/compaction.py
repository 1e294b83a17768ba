"""A compaction as the loop runs it: the context guard's work, told in the log (the summary
call's LLM_PROMPT and LLM_OUTPUT, then WORKSPACE_UPDATED{kind: compact}) and its summary's
tokens spent like any other call's."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

from services.executor.engine.state import LoopState
from services.executor.log.prompts import PromptSettings, prompt_payload
from services.executor.log.reporter import RunReporter
from services.executor.policies.context_guard import ContextGuard, Situation
from shuttle.llm.protocol import Message, ToolSchema
from shuttle.usage import TokenUsage


async def fit_context(
    guard: ContextGuard,
    state: LoopState,
    schemas: Sequence[ToolSchema],
    reporter: RunReporter,
    agent_id: str,
    prompt: PromptSettings,
    account: Callable[[TokenUsage], Awaitable[None]],
) -> None:
    """Compact the agent's conversation if it is over the guard's budget, and report it."""
    situation = Situation(
        json_mode=not state.native,
        tool_calls=len(state.steps),
        interrupted=state.interrupted,
    )

    async def announce(messages: Sequence[Message]) -> None:
        await reporter.llm_prompt(agent_id, prompt_payload(prompt, messages, "compact"))

    compaction = await guard.fit(state.conversation, schemas, situation, announce=announce)
    if compaction is None:
        return
    if compaction.summary_call is not None:
        await reporter.llm_output(agent_id, compaction.summary_call, "compact")
        await account(compaction.summary_call.usage)
    await reporter.compacted(
        agent_id,
        compaction.method,
        compaction.original_messages,
        compaction.kept_messages,
        compaction.tokens_before,
        compaction.tokens_after,
        compaction.entries,
    )
