"""The completion checklist: one verification prompt before a multi-tool answer is accepted."""

from __future__ import annotations

CHECKLIST_PROMPT = (
    "Before you finish, check your answer:\n"
    "1. Does it fully address the user's original question?\n"
    "2. Are the key facts verified by the tool results?\n"
    "3. Do any of the collected results contradict each other?\n"
    "If something is missing, continue working with the tools; otherwise give your final answer."
)


class CompletionChecklist:
    """Fires at most once per run, and only after `min_tools` tool calls."""

    def __init__(self, enabled: bool, min_tools: int) -> None:
        self._enabled = enabled
        self._min_tools = min_tools
        self._fired = False

    def before_final_answer(self, tool_calls: int) -> str | None:
        if not self._enabled or self._fired or tool_calls < self._min_tools:
            return None
        self._fired = True
        return CHECKLIST_PROMPT
