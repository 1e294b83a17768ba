"""`structured_llm_call`: schema-shaped data from any model, degrading by what it can do.

Level 1 forces a native function call (when the model has `tool_call`); level 2 asks for a
JSON object through `response_format` (when it has `json_mode`), retrying once with a
reformat prompt; level 3 asks in plain text and digs the JSON out of the reply, retrying
once. Then the default value, or StructuredOutputError. At most 5 calls (tool_call and
json_mode), 4 (json_mode only), 3 (tool_call only), 2 (plain text only).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, Generic, TypeVar, overload

from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match

from services.planner.json_extract import JSONExtractionError, extract_json
from shuttle.llm.protocol import LLM, ChatResult, ContextOverflowError, LLMError, Message
from shuttle.usage import TokenUsage

T = TypeVar("T")

ParseFn = Callable[[dict[str, Any]], T]
RegexFallback = Callable[[str], dict[str, Any] | None]


class StructuredLevel(IntEnum):
    NATIVE_TOOL_CALL = 1
    JSON_MODE = 2
    PLAIN_TEXT = 3
    DEFAULT = 4


@dataclass(frozen=True)
class StructuredCallResult(Generic[T]):
    value: T
    raw: dict[str, Any] | None
    """The validated JSON object; None when the default was returned."""
    level: StructuredLevel
    attempts: int
    usage: TokenUsage


class StructuredOutputError(Exception):
    """No level produced a value that parses and validates, and there was no default."""

    def __init__(self, problems: Sequence[str], attempts: int, usage: TokenUsage) -> None:
        last = problems[-1] if problems else "no level could be tried"
        super().__init__(
            f"the model gave no valid structured output after {attempts} call(s); "
            f"last problem: {last}"
        )
        self.problems = list(problems)
        self.attempts = attempts
        self.usage = usage


class _NoDefault:
    pass


NO_DEFAULT: Any = _NoDefault()


class _Invalid(Exception):
    """One reply that did not yield a valid value (the reason goes into the retry prompt)."""


@dataclass
class _Call(Generic[T]):
    llm: LLM
    messages: list[Message]
    schema: Mapping[str, Any]
    name: str
    description: str
    parse: Callable[[dict[str, Any]], T]
    regex_fallback: RegexFallback | None
    attempts: int = 0
    usage: TokenUsage = field(default_factory=TokenUsage)
    problems: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.validator = Draft202012Validator(dict(self.schema))

    async def chat(self, messages: Sequence[Message], **kwargs: Any) -> ChatResult:
        self.attempts += 1
        result = await self.llm.chat(messages, **kwargs)
        self.usage += result.usage
        return result

    def accept(self, raw: Any) -> tuple[dict[str, Any], T]:
        if not isinstance(raw, dict):
            raise _Invalid(f"expected a JSON object, got {type(raw).__name__}")
        error = best_match(self.validator.iter_errors(raw))
        if error is not None:
            where = "/".join(str(p) for p in error.absolute_path) or "(root)"
            raise _Invalid(f"does not match the schema at {where}: {error.message}")
        try:
            return raw, self.parse(raw)
        except (ValueError, TypeError, KeyError) as exc:
            raise _Invalid(str(exc)) from exc

    def instructed(self) -> list[Message]:
        """The caller's messages with the schema instruction added to the system prompt."""
        instruction = (
            "Respond with only a JSON object (no prose, no code fence) that matches this "
            f"JSON schema:\n{json.dumps(self.schema, ensure_ascii=False)}"
        )
        messages = list(self.messages)
        if messages and messages[0].get("role") == "system":
            first = messages[0]
            messages[0] = {**first, "content": f"{first.get('content') or ''}\n\n{instruction}"}
        else:
            messages.insert(0, {"role": "system", "content": instruction})
        return messages


def reformat_prompt(problem: str) -> str:
    return (
        f"Your previous response could not be used: {problem}. Reply again with only a "
        "valid JSON object that matches the schema: double quotes, no trailing commas, no "
        "text before or after it."
    )


@overload
async def structured_llm_call(
    llm: LLM,
    messages: Sequence[Message],
    schema: Mapping[str, Any],
    *,
    parse_fn: None = None,
    schema_name: str = ...,
    description: str = ...,
    default: Any = ...,
    regex_fallback: RegexFallback | None = ...,
) -> StructuredCallResult[dict[str, Any]]: ...


@overload
async def structured_llm_call(
    llm: LLM,
    messages: Sequence[Message],
    schema: Mapping[str, Any],
    *,
    parse_fn: ParseFn[T],
    schema_name: str = ...,
    description: str = ...,
    default: Any = ...,
    regex_fallback: RegexFallback | None = ...,
) -> StructuredCallResult[T]: ...


async def structured_llm_call(
    llm: LLM,
    messages: Sequence[Message],
    schema: Mapping[str, Any],
    *,
    parse_fn: ParseFn[Any] | None = None,
    schema_name: str = "respond",
    description: str = "Return the answer in the required structure.",
    default: Any = NO_DEFAULT,
    regex_fallback: RegexFallback | None = None,
) -> StructuredCallResult[Any]:
    """Raises StructuredOutputError (no default), ContextOverflowError (prompt too long)."""
    call: _Call[Any] = _Call(
        llm,
        list(messages),
        schema,
        schema_name,
        description,
        parse_fn or (lambda raw: raw),
        regex_fallback,
    )
    abilities = llm.abilities
    levels: list[tuple[StructuredLevel, Callable[[_Call[Any]], Any]]] = []
    if abilities.tool_call:
        levels.append((StructuredLevel.NATIVE_TOOL_CALL, _native))
    if abilities.json_mode:
        levels.append((StructuredLevel.JSON_MODE, _json_mode))
    levels.append((StructuredLevel.PLAIN_TEXT, _plain_text))
    for level, attempt in levels:
        try:
            found = await attempt(call)
        except ContextOverflowError:
            raise
        except LLMError as exc:
            call.problems.append(f"level {level.value}: {exc}")
            continue
        if found is not None:
            raw, value = found
            return StructuredCallResult(value, raw, level, call.attempts, call.usage)
    if default is not NO_DEFAULT:
        return StructuredCallResult(
            default, None, StructuredLevel.DEFAULT, call.attempts, call.usage
        )
    raise StructuredOutputError(call.problems, call.attempts, call.usage)


async def _native(call: _Call[T]) -> tuple[dict[str, Any], T] | None:
    tool = {
        "type": "function",
        "function": {"name": call.name, "description": call.description, "parameters": call.schema},
    }
    if call.llm.abilities.tool_choice:
        choice: Any = {"type": "function", "function": {"name": call.name}}
        messages = call.messages
    else:  # no way to force it: ask in words
        choice = None
        messages = [*call.messages, {"role": "user", "content": f"Call `{call.name}` now."}]
    result = await call.chat(messages, tools=[tool], tool_choice=choice)
    calls = [c for c in result.tool_calls if c.name == call.name] or list(result.tool_calls)
    try:
        if not calls:
            raise _Invalid("the model did not call the function")
        try:
            raw = json.loads(calls[0].arguments)
        except ValueError:
            raw = extract_json(calls[0].arguments)
        return call.accept(raw)
    except (_Invalid, JSONExtractionError) as exc:
        call.problems.append(f"level 1: {exc}")
        return None


async def _json_mode(call: _Call[T]) -> tuple[dict[str, Any], T] | None:
    return await _ask_twice(call, 2, {"type": "json_object"})


async def _plain_text(call: _Call[T]) -> tuple[dict[str, Any], T] | None:
    return await _ask_twice(call, 3, None)


async def _ask_twice(
    call: _Call[T], level: int, response_format: dict[str, Any] | None
) -> tuple[dict[str, Any], T] | None:
    """One try and one retry with a reformat prompt that says what was wrong."""
    messages = call.instructed()
    for _ in range(2):
        result = await call.chat(messages, response_format=response_format)
        try:
            return call.accept(_parse_text(call, result.content))
        except _Invalid as exc:
            problem = str(exc)
        call.problems.append(f"level {level}: {problem}")
        messages = [
            *messages,
            {"role": "assistant", "content": result.content},
            {"role": "user", "content": reformat_prompt(problem)},
        ]
    return None


def _parse_text(call: _Call[Any], text: str) -> Any:
    try:
        return extract_json(text)
    except JSONExtractionError as exc:
        if call.regex_fallback is not None:
            try:
                fallback = call.regex_fallback(text)
            except Exception as fallback_error:  # a caller's helper must not end the chain
                raise _Invalid(f"{exc}; regex fallback failed: {fallback_error}") from exc
            if fallback is not None:
                return fallback
        raise _Invalid(f"could not be parsed as JSON ({exc})") from exc
