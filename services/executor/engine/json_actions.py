"""JSON-action mode: tool descriptions in the system prompt, actions parsed from the reply."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from services.executor.ports import ToolDefinition
from shuttle.utf8 import json_text

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


MAX_CANDIDATES = 200
"""Opening braces tried per reply, so hostile text cannot make parsing quadratic."""


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


# NaN and Infinity are not JSON: arguments holding them could not be passed on as JSON.
_decoder = json.JSONDecoder(parse_constant=_reject_constant)


def json_objects(text: str) -> Iterator[dict[str, Any]]:
    """The JSON objects in `text`, in order (code fences and prose around them are ignored).

    The standard decoder's `raw_decode` does the parsing; this only tries each `{` in turn.
    """
    start = text.find("{")
    for _ in range(MAX_CANDIDATES):
        if start == -1:
            return
        try:
            value, _ = _decoder.raw_decode(text, start)
        except (ValueError, RecursionError):  # RecursionError: absurdly deep nesting
            pass
        else:
            if isinstance(value, dict):
                yield value
        start = text.find("{", start + 1)


def extract_json_object(text: str) -> dict[str, Any] | None:
    """The first JSON object in `text`, or None."""
    return next(json_objects(text), None)


def parse_action(text: str) -> JsonAction | None:
    """The first well-formed action in a reply; None when there is none.

    Other objects before it (an example in the prose, say) are skipped.
    """
    for data in json_objects(text):
        action = _action_of(data)
        if action is not None:
            return action
    return None


def _action_of(data: dict[str, Any]) -> JsonAction | None:
    kind = data.get("type")
    reasoning = str(data.get("reasoning") or "")
    if kind == "tool_call" and isinstance(data.get("tool_name"), str) and data["tool_name"]:
        args = data.get("tool_args")
        if args is None:
            args = {}
        if not isinstance(args, dict):
            return None  # tools take an object of named arguments
        arguments_json = json_text(args)  # a lone surrogate escaped, as native calls bring it
        return JsonAction("tool_call", reasoning, data["tool_name"], arguments_json)
    if kind == "final_answer" and "answer" in data:
        answer = data["answer"]
        text_answer = answer if isinstance(answer, str) else json.dumps(answer, ensure_ascii=False)
        return JsonAction("final_answer", reasoning, answer=text_answer)
    return None


def observation_message(tool_name: str, observation: str) -> str:
    return f"Observation from {tool_name}:\n{observation}"
