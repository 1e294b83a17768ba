"""A run's token budget: one warning at the threshold, then a graceful end when it is spent."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class BudgetCheck:
    warn: bool = False
    """True exactly once: the first time usage reaches the warning threshold."""
    exceeded: bool = False


class TokenBudget:
    def __init__(self, budget: int, warn_percent: float) -> None:
        self.budget = budget
        self.warn_percent = warn_percent
        self._warned = False

    def check(self, tokens_used: int) -> BudgetCheck:
        if self.budget <= 0:
            return BudgetCheck()
        warn = not self._warned and tokens_used * 100 >= self.budget * self.warn_percent
        self._warned = self._warned or warn
        return BudgetCheck(warn=warn, exceeded=tokens_used >= self.budget)
