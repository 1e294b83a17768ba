"""The completion checklist: one verification prompt before a multi-tool answer is accepted."""

from __future__ import annotations

from dataclasses import dataclass

CHECKLIST_PROMPT = (
    "Before you finish, check your answer:\n"
    "1. Does it fully address the user's original question?\n"
    "2. Are the key facts verified by the tool results?\n"
    "3. Do any of the collected results contradict each other?\n"
    "If something is missing, continue working with the tools; otherwise give your final answer."
)


@dataclass
class CompletionChecklist:
    """Fires at most once per run, and only after `min_tools` tool calls."""

    enabled: bool
    min_tools: int
    fired: bool = False

    def before_final_answer(self, tool_calls: int) -> str | None:
        if not self.enabled or self.fired or tool_calls < self.min_tools:
            return None
        self.fired = True
        return CHECKLIST_PROMPT
