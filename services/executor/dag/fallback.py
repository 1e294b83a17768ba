"""When the router chose COMPLEX and the first plan says otherwise, the run goes STANDARD.

A small model routes plain questions COMPLEX and then plans nonsense for them: no plan at
all, or a step that restates the whole query beside others that wander off. A team would
spend a plan, a step agent and a synthesis on what one agent does; the run falls back to
STANDARD instead, before any step ran, and says so with STATUS_UPDATE{kind: fell_back}. A
mode the user forced is kept.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from services.executor.log.reporter import RunReporter
from services.executor.ports import Route
from shuttle.plans import PlanStep
from shuttle.usage import TokenUsage

FELL_BACK = "fell_back"
RESTATED_SHARE = 0.6
"""A step holding at least this share of the query's words restates the query."""

_WORD = re.compile(r"[^\W_]+")


class PlanFallback(Exception):
    """The team is not worth running; `usage`: what planning spent."""

    def __init__(self, reason: str, usage: TokenUsage) -> None:
        super().__init__(reason)
        self.reason = reason
        self.usage = usage


def senseless_plan(steps: Sequence[PlanStep], query: str) -> str:
    """Why a first plan is not worth a team (empty: it is): a step that starts from nothing
    and restates the task does all of it, so the plan does not divide the work."""
    for step in steps:
        if not step.dependencies and restates(step.task, query):
            if len(steps) == 1:
                return "the plan's one step restates the task"
            return f"step {step.id!r} restates the whole task, so the plan does not divide it"
    return ""


def restates(task: str, query: str) -> bool:
    asked = _words(query)
    return bool(asked) and len(asked & _words(task)) >= RESTATED_SHARE * len(asked)


def _words(text: str) -> set[str]:
    return {w.casefold() for w in _WORD.findall(text)}


async def report_fallback(reporter: RunReporter, route: Route, fallback: PlanFallback) -> Route:
    """Say so on the log; the STANDARD route, charged with planning's spend beside routing's."""
    await reporter.status_update(
        "",
        f"Running as STANDARD: {fallback.reason}",
        {
            "kind": FELL_BACK,
            "from_mode": route.mode,
            "mode": "STANDARD",
            "reason": fallback.reason,
            "usage": fallback.usage.as_payload(),
            "cost_usd": fallback.usage.cost_usd,
        },
    )
    return Route("STANDARD", route.estimated_complexity, route.usage + fallback.usage)
