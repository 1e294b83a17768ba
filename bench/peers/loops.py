"""The ReAct loop without Shuttle: the same conversation on the `openai` client alone and on
Shuttle's own model client, the calculator in-process (LangGraph's and the Agents SDK's agents
are in `langgraph_agent` and `agents_sdk`).

Each asks the model with the calculator's tool until it answers, then streams the synthesis,
as a Shuttle run of the STANDARD mode does.
"""

from __future__ import annotations

from typing import Any

import openai

from services.tools.builtins.calculator import Calculator
from shuttle.llm.openai_model import OpenAIModel
from shuttle.llm.protocol import ChatResult

CALCULATOR = Calculator()
TOOLS: Any = [
    {
        "type": "function",
        "function": {
            "name": "calculator",
            "description": "Evaluate an arithmetic expression.",
            "parameters": {
                "type": "object",
                "properties": {"expression": {"type": "string"}},
                "required": ["expression"],
            },
        },
    }
]
LLM_TIMEOUT_SECONDS = 120.0


async def openai_loop(client: openai.AsyncOpenAI, k: int) -> None:
    """The conversation with the openai client alone: K tool rounds, answer, synthesis."""
    messages: Any = [{"role": "user", "content": f"iterations={k}"}]
    while True:
        response = await client.chat.completions.create(
            model="scripted-model", messages=messages, tools=TOOLS
        )
        message = response.choices[0].message
        if not message.tool_calls:
            break
        messages.append(message.model_dump(exclude_none=True))
        for call in message.tool_calls:
            observation = await CALCULATOR.run({"expression": f"{len(messages)}+1"})
            messages.append({"role": "tool", "tool_call_id": call.id, "content": observation.text})
    stream = await client.chat.completions.create(
        model="scripted-model", messages=messages, stream=True
    )
    async for _ in stream:
        pass


async def model_client_loop(model_client: OpenAIModel, k: int) -> None:
    """The same conversation on the model client the executor calls the model with: what the
    model calls cost Shuttle, with no engine, services or log around them."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": f"iterations={k}"}]
    while True:
        result = await model_client.chat(messages, TOOLS)
        if not result.tool_calls:
            break
        messages.append(assistant_message(result))
        for call in result.tool_calls:
            observation = await CALCULATOR.run({"expression": f"{len(messages)}+1"})
            messages.append({"role": "tool", "tool_call_id": call.id, "content": observation.text})
    async for _ in model_client.stream_chat(messages):
        pass


def assistant_message(result: ChatResult) -> dict[str, Any]:
    """The model's reply as the next request's assistant message, tool calls included."""
    return {
        "role": "assistant",
        "content": result.content,
        "tool_calls": [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments},
            }
            for call in result.tool_calls
        ],
    }
