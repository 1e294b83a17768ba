"""A run's token budget, one ledger for everything the run spends: a ReAct agent's calls, or
every step of a team together. One warning at the threshold, one report when it is spent;
whoever spends checks it before each model call, so the overshoot is bounded by the calls
already in flight when it ran out."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True)
class BudgetCheck:
    warn: bool = False
    """True exactly once: for the charge that reached the warning threshold."""
    exhausted: bool = False
    """True exactly once: for the charge that spent the budget."""


class BudgetReporter(Protocol):
    async def budget_threshold(
        self, agent_id: str, used: int, budget: int, threshold_percent: float
    ) -> None: ...

    async def error(
        self,
        error_type: str,
        error_message: str,
        *,
        fatal: bool,
        agent_id: str = "",
        extra: Mapping[str, Any] | None = None,
    ) -> None: ...


@dataclass
class TokenBudget:
    """Tokens spent against a budget (0: no limit)."""

    budget: int
    warn_percent: float
    spent: int = 0
    warned: bool = False
    """The warning threshold has been reported."""
    exhaustion_seen: bool = False
    """The exhaustion has been reported."""

    @property
    def exhausted(self) -> bool:
        return self.budget > 0 and self.spent >= self.budget

    def charge(self, tokens: int) -> BudgetCheck:
        self.spent += max(tokens, 0)
        if self.budget <= 0:
            return BudgetCheck()
        warn = not self.warned and self.spent * 100 >= self.budget * self.warn_percent
        self.warned = self.warned or warn
        exhausted = self.exhausted and not self.exhaustion_seen
        self.exhaustion_seen = self.exhaustion_seen or exhausted
        return BudgetCheck(warn=warn, exhausted=exhausted)

    def refusal(self) -> str | None:
        """Why no further work may start, or None while tokens are left."""
        if not self.exhausted:
            return None
        return f"token budget exhausted ({self.spent} of {self.budget} tokens used)"


async def spend(
    budget: TokenBudget, tokens: int, reporter: BudgetReporter, agent_id: str
) -> BudgetCheck:
    """Charge one model call's tokens and report what it crossed: BUDGET_THRESHOLD, then
    ERROR_OCCURRED{BUDGET_EXCEEDED}, each once per budget whoever crosses it."""
    check = budget.charge(tokens)
    # Read the figures before the first await: other spenders may charge meanwhile.
    used = budget.spent
    if check.warn:
        await reporter.budget_threshold(agent_id, used, budget.budget, budget.warn_percent)
    if check.exhausted:
        await reporter.error(
            "BUDGET_EXCEEDED",
            f"token budget exhausted: {used} of {budget.budget} tokens used",
            fatal=False,
            agent_id=agent_id,
            extra={"tokens_used": used, "tokens_budget": budget.budget},
        )
    return check
