"""Mid-loop self-reflection: a prompt to step back every N real tool calls."""

from __future__ import annotations

from dataclasses import dataclass

REFLECTION_PROMPT = (
    "Pause and reflect before your next step. Are you still on course for the user's original "
    "goal? Are you repeating similar actions or going in circles? What is the most direct next "
    "step to finish? Should you give your final answer now?"
)


@dataclass
class SelfReflection:
    """Counts only real tool calls: parse retries, thinking and interrupts do not count."""

    interval: int
    calls: int = 0

    def after_tool_calls(self, count: int) -> str | None:
        """The prompt to inject once this batch of `count` calls crosses a multiple of N."""
        if self.interval <= 0 or count <= 0:
            return None
        before = self.calls // self.interval
        self.calls += count
        return REFLECTION_PROMPT if self.calls // self.interval > before else None
