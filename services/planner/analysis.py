"""Plan analysis: did the executed steps achieve the task, and what is the answer."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from services.planner.structured import structured_llm_call
from shuttle.llm.protocol import LLM
from shuttle.plans import Analysis, StepResult

RESULT_CHARS = 2_000
"""Each step's result is cut to this many characters in the prompt."""

ANALYSIS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "achieved": {"type": "boolean"},
        "confidence": {"type": "number"},
        "answer": {"type": "string"},
        "reasoning": {"type": "string"},
    },
    "required": ["achieved", "confidence"],
}

ANALYST_PROMPT = (
    "You judge whether the results of a plan's steps achieve the user's task. Say whether it "
    "is achieved, how confident you are (0 to 1), the final answer to the task built from the "
    "results (in the language of the task), and your reasoning in one or two sentences."
)


def parse_analysis(raw: Mapping[str, Any]) -> Analysis:
    confidence = float(raw["confidence"])
    if math.isnan(confidence):
        raise ValueError("confidence is not a number")
    return Analysis(
        achieved=bool(raw["achieved"]),
        confidence=min(1.0, max(0.0, confidence)),
        answer=str(raw.get("answer") or ""),
        reasoning=str(raw.get("reasoning") or ""),
    )


def analysis_messages(query: str, results: Sequence[StepResult]) -> list[dict[str, Any]]:
    lines = []
    for outcome in results:
        status = "FAILED" if outcome.failed else "done"
        lines.append(
            f"[{outcome.step_id}] {outcome.task} ({status}):\n{outcome.result[:RESULT_CHARS]}"
        )
    body = "\n\n".join(lines) or "(no step ran)"
    return [
        {"role": "system", "content": ANALYST_PROMPT},
        {"role": "user", "content": f"Task: {query}\n\nStep results:\n{body}"},
    ]


async def analyze_plan(llm: LLM, query: str, results: Sequence[StepResult]) -> Analysis:
    """Raises StructuredOutputError when the model gives no usable verdict."""
    result = await structured_llm_call(
        llm,
        analysis_messages(query, results),
        ANALYSIS_SCHEMA,
        parse_fn=parse_analysis,
        schema_name="submit_analysis",
        description="Whether the task is achieved, with confidence, answer and reasoning.",
    )
    return replace(result.value, usage=result.usage)
