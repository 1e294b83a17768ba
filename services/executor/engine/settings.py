"""Per-agent thresholds of the ReAct engine, taken from the deployment's settings."""

from __future__ import annotations

from dataclasses import dataclass

from shuttle.settings import Settings


@dataclass(frozen=True)
class AgentSettings:
    """Everything one agent's run is tuned by; a run may replace some (e.g. its budget)."""

    max_iterations: int
    tool_timeout_seconds: float
    use_native_tools: bool
    reflection_interval: int
    """Inject a self-reflection prompt every this many real tool calls (0: never)."""
    cycle_threshold: int
    """Warn when one (tool, arguments) pair has been called this many times (0: never)."""
    completion_check: bool
    completion_check_min_tools: int
    tool_selection_threshold: int
    """Select tools through the planner when more than this many are available."""
    tool_selection_max: int
    token_budget: int
    """Tokens one run may spend (0: no limit)."""
    budget_warn_percent: float
    context_tokens: int
    context_ratio: float
    """Share of the context window the conversation may fill before it is compacted."""
    compact_keep_recent: int
    run_timeout_seconds: float = 600.0
    """How long a run may take from its start; then it answers from what it has."""
    escalate_max_iterations: int = 0
    """A SIMPLE run's way out: at its cap with the model still calling tools it goes on as
    STANDARD, up to this many iterations (0: it does not)."""

    @classmethod
    def from_settings(cls, settings: Settings) -> AgentSettings:
        return cls(
            max_iterations=settings.max_iterations,
            tool_timeout_seconds=settings.tool_timeout_seconds,
            use_native_tools=settings.react_use_native_tools,
            reflection_interval=settings.react_reflection_interval,
            cycle_threshold=settings.react_cycle_threshold,
            completion_check=settings.react_completion_check,
            completion_check_min_tools=settings.react_completion_check_min_tools,
            tool_selection_threshold=settings.react_tool_selection_threshold,
            tool_selection_max=settings.react_tool_selection_max,
            token_budget=settings.react_token_budget,
            budget_warn_percent=settings.react_budget_warn_percent,
            context_tokens=settings.context_tokens,
            context_ratio=settings.react_context_ratio,
            compact_keep_recent=settings.react_compact_keep_recent,
            run_timeout_seconds=settings.run_timeout_seconds,
        )

    @property
    def context_budget(self) -> int:
        return int(self.context_tokens * self.context_ratio)
