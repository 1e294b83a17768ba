"""The team's final answer: one streamed call over every step's result, like a ReAct answer."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from services.executor.dag.handoff import cut
from services.executor.dag.state import StepRecord
from services.executor.engine.synthesis import echoes_prompt
from services.executor.log.partials import ReasoningRelay
from services.executor.log.prompts import PromptSettings, prompt_payload
from services.executor.log.reporter import RunReporter
from shuttle.llm.protocol import LLM, ChatResult, LLMError
from shuttle.usage import TokenUsage

SYNTHESIS_AGENT = "synthesizer"
TEAM_SYNTHESIS_PROMPT = (
    "A team of agents worked on the user's task in steps. Write the final answer to the task "
    "from their results, in the language of the task. Say plainly what could not be done."
)
RESULT_CHARS = 4_000


def team_synthesis_messages(
    query: str, outcomes: Sequence[StepRecord], draft: str, follow_ups: Sequence[str]
) -> list[dict[str, Any]]:
    lines = [f"Task: {query}"]
    for outcome in outcomes:
        status = "FAILED" if outcome.failed else "done"
        lines.append(
            f"\nStep {outcome.step.id} ({status}): {outcome.step.task}\n"
            f"{cut(outcome.result, RESULT_CHARS)}"
        )
    if follow_ups:
        lines.append("\nThe user added while the team worked:\n" + "\n".join(follow_ups))
    if draft:
        lines.append(f"\nA reviewer's draft answer:\n{draft}")
    return [
        {"role": "system", "content": TEAM_SYNTHESIS_PROMPT},
        {"role": "user", "content": "\n".join(lines)},
    ]


def budget_team_answer(budget: int, outcomes: Sequence[StepRecord], draft: str) -> str:
    """The team's answer once its token budget is spent, made without another model call:
    the latest review's draft and every step's result as far as it got."""
    lines = [f"The token budget of {budget} tokens was used up before the team finished the task."]
    if draft.strip():
        lines.append(f"\nDraft answer from the latest review:\n{draft.strip()}")
    for outcome in outcomes:
        if not outcome.ran:
            status = "not run"
        elif outcome.failed:
            status = "failed"
        else:
            status = "stopped by the budget" if outcome.cut_short else "done"
        lines.append(
            f"\nStep {outcome.step.id} ({status}): {outcome.step.task}\n"
            f"{cut(outcome.result, RESULT_CHARS)}"
        )
    if not outcomes and not draft.strip():
        lines.append("No step was run before it ran out.")
    return "\n".join(lines)


def steps_found(records: Sequence[StepRecord]) -> str:
    """What the steps that ran found, a line each (empty when none did)."""
    found = [f"- {r.step.task}: {r.result}" for r in records if r.ran and not r.failed]
    return "\n".join(found)


def answer_without_synthesis(outcomes: Sequence[StepRecord], draft: str) -> str:
    """What stands when the synthesis gives nothing usable: the review's draft, else the
    steps' results."""
    if draft.strip():
        return draft
    found = steps_found(outcomes)
    return f"What the team's steps found:\n{found}" if found else ""


async def stream_team_answer(
    llm: LLM, reporter: RunReporter, messages: list[dict[str, Any]], fallback: str
) -> tuple[str, TokenUsage]:
    """The streamed answer and its usage. `fallback` stands instead when the model fails
    (said on the log), says nothing or gives its prompt back."""
    await reporter.llm_prompt(
        SYNTHESIS_AGENT, prompt_payload(PromptSettings.of(llm), messages, "answer")
    )
    stream = llm.stream_chat(
        messages, on_reasoning=ReasoningRelay(reporter, SYNTHESIS_AGENT, "answer")
    )
    parts: list[str] = []
    final: ChatResult | None
    try:
        async for delta in stream:
            await reporter.answer_delta(SYNTHESIS_AGENT, delta, len(parts))
            parts.append(delta)
        final = stream.result
    except LLMError as exc:
        await reporter.error(
            "LLM_ERROR", f"answer synthesis failed: {exc}", fatal=False, agent_id=SYNTHESIS_AGENT
        )
        final = None
    answer = final.content if final is not None else (fallback or "".join(parts))
    instructions = str(messages[0].get("content") or "")
    if fallback.strip() and (not answer.strip() or echoes_prompt(answer, instructions)):
        answer = fallback  # a synthesis that says nothing, or gives its prompt back
    tokens = final.usage.output_tokens if final is not None else 0
    await reporter.answer_completed(SYNTHESIS_AGENT, answer, tokens)
    if final is None:
        return answer, TokenUsage()
    await reporter.llm_output(SYNTHESIS_AGENT, final, phase="answer")
    return answer, final.usage
