"""The two ways the loop talks to the model: native function calling and JSON actions.

A mode turns a model response into a Decision and writes assistant messages and tool
results into the conversation in the shape its protocol requires; the loop does the rest.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Protocol

from services.executor.engine.conversation import Conversation
from services.executor.engine.json_actions import (
    REFORMAT_PROMPT,
    observation_message,
    parse_action,
    replayable,
    system_prompt,
    text_tool_calls,
)
from services.executor.engine.observations import model_observation
from services.executor.ports import ToolDefinition
from shuttle.llm.protocol import ChatResult, Message, ToolSchema
from shuttle.tool_calls import ToolOutcome

NATIVE_SYSTEM_PROMPT = (
    "You are a capable assistant that solves the user's task step by step. "
    "Call the available tools when they help; never guess what a tool would return. "
    "When you have what you need, reply with your answer and no tool call."
)


@dataclass(frozen=True)
class ToolRequest:
    call_id: str
    name: str
    arguments_json: str


def call_id(agent_id: str, iteration: int, index: int) -> str:
    """Shuttle's own id of a tool call: the same for a model call re-issued after a takeover,
    so the tools service's ledger answers the repeat instead of running the tool again."""
    return f"{agent_id}.{iteration}.{index}"


@dataclass(frozen=True)
class Decision:
    calls: tuple[ToolRequest, ...]
    """Empty: the model wants to finish with `answer`."""
    answer: str
    reasoning: str
    parse_failed: bool = False
    empty: bool = False
    """Neither a tool call nor any text: the model said nothing."""

    @property
    def next_action(self) -> str:
        if self.parse_failed:
            return "reformat"
        return "invoke_tool" if self.calls else "final_answer"


class Mode(Protocol):
    name: str
    drains_after_assistant: bool
    """JSON mode takes interrupts right after each assistant message; native mode only after
    the tool results, since `tool` messages must follow their assistant message directly."""

    def system_prompt(self, tools: Sequence[ToolDefinition]) -> str: ...

    def tool_schemas(self, tools: Sequence[ToolDefinition]) -> list[ToolSchema]: ...

    def decide(
        self, response: ChatResult, agent_id: str, iteration: int, offered: Collection[str]
    ) -> Decision: ...

    def record_assistant(
        self, conversation: Conversation, response: ChatResult, decision: Decision
    ) -> None: ...

    def record_parse_failure(self, conversation: Conversation, response: ChatResult) -> None: ...

    def record_results(
        self,
        conversation: Conversation,
        calls: Sequence[ToolRequest],
        outcomes: Sequence[ToolOutcome],
    ) -> None: ...


class NativeMode:
    name = "native"
    drains_after_assistant = False

    def system_prompt(self, tools: Sequence[ToolDefinition]) -> str:
        return NATIVE_SYSTEM_PROMPT

    def tool_schemas(self, tools: Sequence[ToolDefinition]) -> list[ToolSchema]:
        return [d.as_openai_tool() for d in tools]

    def decide(
        self, response: ChatResult, agent_id: str, iteration: int, offered: Collection[str]
    ) -> Decision:
        named = [(c.name, c.arguments) for c in response.tool_calls]
        written = not named and bool(response.content)
        if written:
            # A model that writes its call as text (a <tool_call> block, a bare JSON object
            # naming a tool) instead of calling meant to call.
            named = text_tool_calls(response.content, offered)
        calls = tuple(
            ToolRequest(call_id(agent_id, iteration, index), name, arguments)
            for index, (name, arguments) in enumerate(named)
        )
        reasoning = response.reasoning_content if written and calls else response.content
        reasoning = reasoning or response.reasoning_content
        answer = "" if calls else response.content
        return Decision(calls, answer, reasoning, empty=not calls and not answer.strip())

    def record_assistant(
        self, conversation: Conversation, response: ChatResult, decision: Decision
    ) -> None:
        # The model's own ids stay on LLM_OUTPUT: the conversation carries Shuttle's, which a
        # re-issued model call reproduces.
        message: Message = {"role": "assistant", "content": response.content or None}
        if decision.calls:
            if not response.tool_calls:
                message["content"] = None  # the calls it wrote as text are the calls below
            # Arguments that are no JSON object got an error observation; the conversation
            # carries them as `{}`, which strict servers take on the next request.
            message["tool_calls"] = [
                {
                    "id": call.call_id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": replayable(call.arguments_json)},
                }
                for call in decision.calls
            ]
        else:
            message["content"] = response.content
        conversation.add(message)

    def record_parse_failure(self, conversation: Conversation, response: ChatResult) -> None:
        raise AssertionError("native responses are structured by the API")

    def record_results(
        self,
        conversation: Conversation,
        calls: Sequence[ToolRequest],
        outcomes: Sequence[ToolOutcome],
    ) -> None:
        for call, outcome in zip(calls, outcomes, strict=True):
            conversation.add(
                {
                    "role": "tool",
                    "tool_call_id": call.call_id,
                    "content": model_observation(outcome),
                }
            )


class JsonMode:
    name = "json"
    drains_after_assistant = True

    def system_prompt(self, tools: Sequence[ToolDefinition]) -> str:
        return system_prompt(tools)

    def tool_schemas(self, tools: Sequence[ToolDefinition]) -> list[ToolSchema]:
        return []

    def decide(
        self, response: ChatResult, agent_id: str, iteration: int, offered: Collection[str]
    ) -> Decision:
        action = parse_action(response.content)
        if action is None:
            return Decision((), response.content, response.reasoning_content, parse_failed=True)
        reasoning = action.reasoning or response.reasoning_content
        if action.type == "final_answer":
            return Decision((), action.answer, reasoning)
        call = ToolRequest(call_id(agent_id, iteration, 0), action.tool_name, action.arguments_json)
        return Decision((call,), "", reasoning)

    def record_assistant(
        self, conversation: Conversation, response: ChatResult, decision: Decision
    ) -> None:
        conversation.add({"role": "assistant", "content": response.content})

    def record_parse_failure(self, conversation: Conversation, response: ChatResult) -> None:
        conversation.add({"role": "assistant", "content": response.content})
        conversation.add_user(REFORMAT_PROMPT)

    def record_results(
        self,
        conversation: Conversation,
        calls: Sequence[ToolRequest],
        outcomes: Sequence[ToolOutcome],
    ) -> None:
        for call, outcome in zip(calls, outcomes, strict=True):
            conversation.add_user(observation_message(call.name, model_observation(outcome)))
