"""JSON-action mode: tool descriptions in the system prompt, actions parsed from the reply."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from services.executor.ports import ToolDefinition

JSON_SYSTEM_PROMPT = """\
You are a capable assistant that solves the user's task step by step, using tools when they \
help; never guess what a tool would return.

Available tools:
{tools}

Reply with exactly one JSON object and nothing else, in one of these two forms:
{{"type": "tool_call", "reasoning": "<why>", "tool_name": "<a tool above>", \
"tool_args": {{<arguments matching its parameters>}}}}
{{"type": "final_answer", "reasoning": "<why you are done>", "answer": "<your answer>"}}
Call one tool per reply. Tool results come back as messages starting with "Observation"."""

REFORMAT_PROMPT = (
    "Your previous reply could not be parsed as a JSON action. Reply again with exactly one "
    'JSON object: {"type": "tool_call", "reasoning": …, "tool_name": …, "tool_args": {…}} or '
    '{"type": "final_answer", "reasoning": …, "answer": …}.'
)


@dataclass(frozen=True)
class JsonAction:
    type: str
    """"tool_call" or "final_answer"."""
    reasoning: str = ""
    tool_name: str = ""
    arguments_json: str = "{}"
    answer: str = ""


def tools_block(definitions: Sequence[ToolDefinition]) -> str:
    if not definitions:
        return "(none: answer directly)"
    return "\n".join(
        f"- {d.name}: {d.description}\n  parameters: {json.dumps(dict(d.parameters))}"
        for d in definitions
    )


def system_prompt(definitions: Sequence[ToolDefinition]) -> str:
    return JSON_SYSTEM_PROMPT.format(tools=tools_block(definitions))


def extract_json_object(text: str) -> dict[str, Any] | None:
    """The first JSON object in `text` (code fences and prose around it are ignored).

    The standard decoder's `raw_decode` does the parsing; this only tries each `{` in turn.
    """
    decoder = json.JSONDecoder()
    start = text.find("{")
    while start != -1:
        try:
            value, _ = decoder.raw_decode(text, start)
        except ValueError:
            start = text.find("{", start + 1)
            continue
        if isinstance(value, dict):
            return value
        start = text.find("{", start + 1)
    return None


def parse_action(text: str) -> JsonAction | None:
    """The action a reply asks for; None when it is not a well-formed action."""
    data = extract_json_object(text)
    if data is None:
        return None
    kind = data.get("type")
    reasoning = str(data.get("reasoning") or "")
    if kind == "tool_call" and isinstance(data.get("tool_name"), str) and data["tool_name"]:
        args = data.get("tool_args", {})
        arguments_json = json.dumps(args if args is not None else {}, ensure_ascii=False)
        return JsonAction("tool_call", reasoning, data["tool_name"], arguments_json)
    if kind == "final_answer" and "answer" in data:
        answer = data["answer"]
        text_answer = answer if isinstance(answer, str) else json.dumps(answer, ensure_ascii=False)
        return JsonAction("final_answer", reasoning, answer=text_answer)
    return None


def observation_message(tool_name: str, observation: str) -> str:
    return f"Observation from {tool_name}:\n{observation}"
