"""The answer-synthesis prompt: the question plus a compact trace of what the tools returned."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from services.executor.engine.conversation import context_note
from services.executor.engine.observations import model_observation
from services.executor.log.reporter import clip
from shuttle.llm.protocol import Message
from shuttle.tool_calls import ToolOutcome

TRACE_RESULT_LIMIT = 2_000
# A follow-up's answer needs the last exchange or two, not the whole session.
HISTORY_MESSAGES = 4
HISTORY_TURN_LIMIT = 2_000

SYNTHESIZER_PROMPT = (
    "You write the final answer to the user's question from the work an agent has done. "
    "Present the result directly; use Markdown where it helps; do not describe the process "
    "or say 'based on the tool output'; answer in the language of the question. "
    "If the steps failed, say plainly what could not be done."
)


@dataclass(frozen=True)
class ToolStep:
    iteration: int
    name: str
    arguments_json: str
    outcome: ToolOutcome


def trace_line(number: int, step: ToolStep) -> str:
    observation = clip(model_observation(step.outcome), TRACE_RESULT_LIMIT)[0]
    if not step.outcome.ok:
        observation = f"error: {observation}"
    return f"{number}. {step.name}({step.arguments_json}) → {observation}"


def synthesis_messages(
    query: str,
    steps: Sequence[ToolStep],
    draft: str,
    history: Sequence[Message] = (),
    task_context: Mapping[str, Any] | None = None,
    follow_ups: Sequence[str] = (),
) -> list[Message]:
    """The synthesis call: the question, what the agent did, its draft, and what the user
    added while it worked (obeyed as the question is)."""
    trace = "\n".join(trace_line(i, step) for i, step in enumerate(steps, 1)) or "(no tools used)"
    earlier = ""
    if history:
        turns = "\n".join(
            f"{m.get('role')}: {clip(str(m.get('content') or ''), HISTORY_TURN_LIMIT)[0]}"
            for m in history[-HISTORY_MESSAGES:]
        )
        earlier = f"Earlier in this conversation:\n{turns}\n\n"
    added = ""
    if follow_ups:
        said = "\n".join(f"- {text}" for text in follow_ups)
        added = f"The user added while the agent worked (follow these too):\n{said}\n\n"
    user = (
        f"{earlier}Question: {query}\n\n{added}Steps taken:\n{trace}\n\n"
        f"Draft answer from the agent:\n{draft or '(none)'}\n\nWrite the final answer."
    )
    system = SYNTHESIZER_PROMPT + context_note(task_context or {})
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def fallback_answer(steps: Sequence[ToolStep]) -> str:
    """What the user gets when the loop ran out of iterations without an answer."""
    if not steps:
        return "I could not reach an answer within the allowed number of steps."
    lines = [f"- {s.name}: {'succeeded' if s.outcome.ok else 'failed'}" for s in steps]
    return (
        "I could not reach a final answer within the allowed number of steps. "
        "Tools that ran:\n" + "\n".join(lines)
    )


def budget_answer(steps: Sequence[ToolStep], budget: int, draft: str) -> str:
    """What the user gets when the token budget ran out: whatever was found so far."""
    lines = [f"The token budget of {budget} tokens was used up before the task was finished."]
    if draft.strip():
        lines.append(f"\n{draft.strip()}")
    found = [s for s in steps if s.outcome.ok]
    if found:
        lines.append("\nWhat was found so far:")
        lines += [
            f"- {s.name}({s.arguments_json}): {clip(model_observation(s.outcome), 300)[0]}"
            for s in found
        ]
    elif not draft.strip():
        lines.append("Nothing was found before it ran out.")
    return "\n".join(lines)


ECHO_OPENING_WORDS = 30
ECHO_SHINGLE = 4
ECHO_MIN_SHINGLES = 3
ECHO_SHARE = 0.5
"""An opening whose 4-word runs are at least half the instructions' own is an echo; an
answer that quotes a phrase of them is not."""
_WORD = re.compile(r"[^\W_]+(?:'[^\W_]+)?")


def echoes_prompt(reply: str, instructions: str = SYNTHESIZER_PROMPT) -> bool:
    """Whether a synthesis merely gives its own prompt back (small models do) instead of
    answering: it opens as the user prompt does and carries another of its headings, or
    its opening is mostly `instructions` (the system prompt) word for word."""
    body = reply.lstrip()
    if body.startswith("Question:") and (
        "Steps taken:" in body or "Draft answer from the agent:" in body
    ):
        return True
    opening = _shingles(_words(body)[:ECHO_OPENING_WORDS])
    if len(opening) < ECHO_MIN_SHINGLES:
        return False
    given = set(_shingles(_words(instructions)))
    return sum(s in given for s in opening) >= ECHO_SHARE * len(opening)


def _words(text: str) -> list[str]:
    return [w.casefold() for w in _WORD.findall(text)]


def _shingles(words: list[str]) -> list[tuple[str, ...]]:
    return [tuple(words[i : i + ECHO_SHINGLE]) for i in range(len(words) - ECHO_SHINGLE + 1)]
