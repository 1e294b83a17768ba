"""llama-cpp-python's server with a chat format for Gemma 3, then its own `main()`.

The packaged GGUF (the base model) carries no chat template, and the library's `gemma`
format drops system messages and everything but user and assistant turns, so Shuttle's
instructions, tool results and the tool calls the model made would never reach it. This
format follows Gemma 3's own template (the system text opens the first user turn) and
writes the turns it has no role for in words: a tool result as a user turn, a tool call as
the model's turn that made it.

python -m tests.real_model.gemma_server --model … --chat_format gemma3 --port …
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from llama_cpp import llama_chat_format
from llama_cpp.server.__main__ import main

serve: Callable[[], None] = main  # the library's entry point is untyped

TURN = "<start_of_turn>{role}\n{text}<end_of_turn>\n"
END_OF_TURN = "<end_of_turn>"


def _text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):  # content parts: keep the text ones
        content = "".join(str(p.get("text") or "") for p in content if isinstance(p, dict))
    text = str(content or "")
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        called = {"name": function.get("name"), "arguments": function.get("arguments")}
        text += f"\n<tool_call>{json.dumps(called)}</tool_call>"
    if message.get("role") == "tool":
        text = f"Tool result ({message.get('name') or message.get('tool_call_id')}):\n{text}"
    return text.strip()


@llama_chat_format.register_chat_format("gemma3")
def format_gemma3(
    messages: list[dict[str, Any]], **kwargs: Any
) -> llama_chat_format.ChatFormatterResponse:
    system = "\n\n".join(_text(m) for m in messages if m.get("role") == "system")
    turns: list[tuple[str, str]] = []
    for message in messages:
        if message.get("role") == "system":
            continue
        role = "model" if message.get("role") == "assistant" else "user"
        text = _text(message)
        if turns and turns[-1][0] == role:  # Gemma's turns alternate
            turns[-1] = (role, f"{turns[-1][1]}\n\n{text}")
        else:
            turns.append((role, text))
    if system:
        if turns and turns[0][0] == "user":
            turns[0] = ("user", f"{system}\n\n{turns[0][1]}")
        else:
            turns.insert(0, ("user", system))
    prompt = "".join(TURN.format(role=role, text=text) for role, text in turns)
    return llama_chat_format.ChatFormatterResponse(
        prompt=prompt + "<start_of_turn>model\n", stop=END_OF_TURN
    )


if __name__ == "__main__":
    serve()
