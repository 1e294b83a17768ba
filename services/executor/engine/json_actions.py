"""JSON-action mode: tool descriptions in the system prompt, actions parsed from the reply."""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import json_repair

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
    An object's own members are not offered again: an object nested in a value (a tool name
    that is an object, say) is part of what its model wrote, not an action of its own.
    """
    start = text.find("{")
    for _ in range(MAX_CANDIDATES):
        if start == -1:
            return
        after = start + 1
        try:
            value, end = _decoder.raw_decode(text, start)
        except (ValueError, RecursionError):  # RecursionError: absurdly deep nesting
            pass
        else:
            if isinstance(value, dict):
                yield value
                after = end
        start = text.find("{", after)


def extract_json_object(text: str) -> dict[str, Any] | None:
    """The first JSON object in `text`, or None."""
    return next(json_objects(text), None)


def repaired_object(text: str) -> dict[str, Any] | None:
    """The object `text` holds once json-repair has mended it (trailing commas, single
    quotes, a missing brace, fences): what small models write when they mean JSON."""
    if "{" not in text or len(text) > MAX_REPAIR_CHARS:
        return None
    try:
        value = json_repair.repair_json(text, return_objects=True)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


MAX_REPAIR_CHARS = 200_000
"""Longer replies are not mended: the repair walks the whole text."""


def parse_action(text: str) -> JsonAction | None:
    """The first well-formed action in a reply; None when there is none.

    Other objects before it (an example in the prose, say) are skipped; a reply with no
    well-formed object is mended with json-repair and tried once more.
    """
    for data in json_objects(text):
        action = _action_of(data)
        if action is not None:
            return action
    mended = repaired_object(text)
    return None if mended is None else _action_of(mended)


def _arguments(data: dict[str, Any], *keys: str) -> dict[str, Any] | None:
    """A call's arguments under the first of `keys` present: an object, or an object written
    as a JSON string (models do both); None when they are neither."""
    args: Any = next((data[key] for key in keys if key in data), None)
    if args is None:
        return {}
    if isinstance(args, str):
        args = extract_json_object(args) or repaired_object(args) or (None if args.strip() else {})
    return args if isinstance(args, dict) else None


def _action_of(data: dict[str, Any]) -> JsonAction | None:
    kind = data.get("type")
    reasoning = str(data.get("reasoning") or "")
    name = data.get("tool_name")
    if kind in ("tool_call", None) and isinstance(name, str) and name:
        args = _arguments(data, "tool_args", "arguments")
        # Tools take an object of named arguments: without one this is no call (an object
        # with no type may still be an answer).
        if args is not None:
            arguments_json = json_text(args)  # a lone surrogate escaped, as native calls do
            return JsonAction("tool_call", reasoning, name, arguments_json)
    if kind in ("final_answer", None) and "answer" in data:
        answer = data["answer"]
        text_answer = answer if isinstance(answer, str) else json.dumps(answer, ensure_ascii=False)
        return JsonAction("final_answer", reasoning, answer=text_answer)
    return None


_HERMES_CALL = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.DOTALL)


def text_tool_calls(text: str, offered: Collection[str]) -> list[tuple[str, str]]:
    """(name, arguments JSON) of the tool calls a model wrote as text instead of calling:
    Hermes-style `<tool_call>{"name": …, "arguments": …}</tool_call>` blocks, or a reply that
    is one JSON object naming an offered tool. Only offered tools count."""
    blocks = _HERMES_CALL.findall(text) if "<tool_call>" in text else []
    candidates: list[dict[str, Any] | None]
    if blocks:
        candidates = [extract_json_object(b) or repaired_object(b) for b in blocks]
    else:
        stripped = text.strip().removeprefix("```json").removeprefix("```").removesuffix("```")
        if not stripped.strip().startswith("{"):
            return []
        candidates = [extract_json_object(stripped) or repaired_object(stripped)]
    calls: list[tuple[str, str]] = []
    for data in candidates:
        if data is None:
            continue
        name = data.get("name", data.get("tool_name"))
        args = _arguments(data, "arguments", "tool_args", "parameters")
        if isinstance(name, str) and name in offered and args is not None:
            calls.append((name, json_text(args)))
    return calls


def replayable(arguments_json: str) -> str:
    """A call's arguments as the next request can carry them: strict servers refuse a
    conversation whose tool call holds arguments that are no JSON object."""
    try:
        value = _decoder.decode(arguments_json)
    except (ValueError, RecursionError):
        return "{}"
    return arguments_json if isinstance(value, dict) else "{}"


def observation_message(tool_name: str, observation: str) -> str:
    return f"Observation from {tool_name}:\n{observation}"
