"""The real-model suite's tasks: what each asks, on which models file, and what it exercises."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

Models = Literal["discovered", "no_tools", "json_mode"]

MODELS_FILES: dict[Models, str] = {
    # Abilities unstated: Shuttle finds out what the server takes.
    "discovered": "",
    # The models file says the model makes no native tool calls: JSON actions in plain text.
    "no_tools": "abilities: {tool_call: false, tool_choice: false, json_mode: false}",
    # JSON actions with response_format json_object (llama.cpp constrains the output).
    "json_mode": "abilities: {tool_call: false, tool_choice: false, json_mode: true}",
}


@dataclass(frozen=True)
class RealTask:
    name: str
    query: str
    exercises: str
    models: Models = "discovered"
    mode: Literal["simple", "standard", "complex"] | None = None
    interrupt: str = ""
    """A follow-up sent once the run's first model call has begun."""


TASKS = [
    RealTask("arithmetic", "What is 12*7?", "arithmetic, routed SIMPLE without a model call"),
    RealTask(
        "word-problem",
        "A box holds 12 eggs. How many eggs are in 7 boxes?",
        "arithmetic in words, routed by the model",
    ),
    RealTask("capital", "Name the capital of France", "a fact"),
    RealTask("greeting", "hello", "small talk"),
    RealTask(
        "two-tools",
        "Use the calculator to work out 17*23, then add 391 to the result.",
        "several tool calls in a row",
    ),
    RealTask(
        "trip-plan",
        "Plan a three-day trip to Kyoto: what to see on each day.",
        "a plan written by the model",
    ),
    RealTask(
        "complex",
        "Compare Python and Go for writing web services: speed, tooling and hiring.",
        "a COMPLEX run: plan, steps, review, synthesis",
        mode="complex",
    ),
    RealTask(
        "interrupt",
        "Write a short poem about the sea.",
        "a user interrupt mid-run",
        interrupt="Answer in French, please.",
    ),
    RealTask(
        "no-native-tools",
        "What is 15% of 240?",
        "a models file with tool_call: false (JSON actions, plain text)",
        models="no_tools",
    ),
    RealTask(
        "forced-json-mode",
        "What is 2 to the power of 10?",
        "JSON actions under response_format json_object",
        models="json_mode",
    ),
    RealTask(
        "long-essay",
        "Write a detailed 3000-word essay on the history of Rome.",
        "output past the cap (finish_reason length)",
    ),
    RealTask("japanese", "日本の首都はどこですか？", "a question in Japanese"),  # noqa: RUF001
    RealTask(
        "python",
        "Use python_exec to print the sum of the squares of 1 to 10.",
        "the sandboxed python_exec tool",
    ),
    RealTask("date", "What is today's date?", "the datetime tool"),
]


def models_file(path: Path, base_url: str, models: Models, context_size: int) -> Path:
    abilities = MODELS_FILES[models]
    lines = [
        "models:",
        "  - name: gemma3-270m",
        f"    base_url: {base_url}",
        "    roles: [general, fast, reasoning, compact]",
        f"    context_size: {context_size}",
    ]
    if abilities:
        lines.append(f"    {abilities}")
    path.write_text("\n".join(lines) + "\n")
    return path
