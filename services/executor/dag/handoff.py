"""What a step is told: its task, the results of the steps it depends on, the user's
follow-ups. Results are cut so that a wide fan-in cannot fill a step's context."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from shuttle.plans import PlanStep

RESULT_CHARS = 4_000
"""One dependency's result is cut to this many characters…"""
CONTEXT_CHARS = 12_000
"""…and all of them together to this many, shared evenly."""


def cut(text: str, limit: int) -> str:
    """Keep the head and the tail (conclusions tend to come last), on character boundaries."""
    if len(text) <= limit:
        return text
    marker = f"\n[… {len(text) - limit} characters omitted …]\n"
    keep = max(limit - len(marker), 0)
    head = keep * 2 // 3
    return text[:head] + marker + text[len(text) - (keep - head) :]


def handed_over(step: PlanStep, results: Mapping[str, str]) -> dict[str, str]:
    """Each dependency's result as it is handed to `step`, cut to the step's share."""
    deps = [d for d in step.dependencies if d in results]
    if not deps:
        return {}
    share = min(RESULT_CHARS, CONTEXT_CHARS // len(deps))
    return {d: cut(results[d], share) for d in deps}


def step_prompt(
    query: str, step: PlanStep, inputs: Mapping[str, str], follow_ups: Sequence[str]
) -> str:
    parts = [
        f"You are one agent of a team working on this overall task:\n{query}",
        f"Your step ({step.id}): {step.task}",
    ]
    if step.tool_hint:
        parts.append(f"The tool most likely useful: {step.tool_hint}.")
    for dep, result in inputs.items():
        parts.append(f"Result of step {dep}:\n{result}")
    if follow_ups:
        lines = "\n".join(f"- {m}" for m in follow_ups)
        parts.append(f"The user added while the team was working:\n{lines}")
    parts.append("Do only your step and answer with its result.")
    return "\n\n".join(parts)
