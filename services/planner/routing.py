"""Complexity routing: SIMPLE, STANDARD or COMPLEX, with a keyword fast path first.

Greetings, thanks and bare arithmetic are SIMPLE; queries full of multi-part research
words are COMPLEX; both without any model call. Everything else is asked of the model,
and falls back to STANDARD if it gives no usable answer, or a mode its own complexity
estimate contradicts.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from services.planner.structured import structured_llm_call
from shuttle.llm.protocol import LLM, ContextOverflowError
from shuttle.usage import TokenUsage


class Mode(StrEnum):
    SIMPLE = "SIMPLE"
    STANDARD = "STANDARD"
    COMPLEX = "COMPLEX"


@dataclass(frozen=True)
class RouteDecision:
    mode: Mode
    estimated_complexity: float
    reasoning: str
    fast_path: bool
    usage: TokenUsage = field(default_factory=TokenUsage)


_SIMPLE = re.compile(
    r"^\s*(?:hi|hello|hey|yo|thanks|thank you|thx|good (?:morning|afternoon|evening)|"
    r"bye|goodbye|ok(?:ay)?|こんにちは|ありがとう|おはよう|こんばんは)\b[\s!.?,]*$",
    re.IGNORECASE,
)
_ARITHMETIC = re.compile(
    r"^\s*(?:what(?:'s| is)\s+|calculate\s+|compute\s+)?[\d\s().+\-*/%^]+[?=.]?\s*$",
    re.IGNORECASE,
)
_COMPLEX_MARKERS = re.compile(
    r"\b(?:compare|comparison|research|investigate|analy[sz]e|analysis|evaluate|"
    r"comprehensive|in[- ]depth|step[- ]by[- ]step|trade-?offs?|pros and cons|report|"
    r"strategy|plan|multiple|several|each of|survey|benchmark|and then|afterwards)\b"
    r"|比較|調査|分析|評価|レポート",
    re.IGNORECASE,
)
COMPLEX_MARKER_COUNT = 3
"""Distinct complex markers needed to route COMPLEX without asking the model."""

CONSISTENT_COMPLEX = 0.5
"""The least estimate that agrees with a COMPLEX answer."""
CONSISTENT_SIMPLE = 0.7
"""The estimate from which a SIMPLE answer contradicts itself."""

ROUTE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "mode": {"type": "string", "enum": [m.value for m in Mode]},
        "estimated_complexity": {"type": "number"},
        "reasoning": {"type": "string"},
    },
    "required": ["estimated_complexity"],
}

ROUTER_PROMPT = (
    "Classify how much work the user's task needs. SIMPLE: a direct reply or one quick "
    "lookup or calculation. STANDARD: a few tool calls by one agent. COMPLEX: several "
    "independent parts worth planning as parallel steps. Give estimated_complexity from 0 "
    "(trivial) to 1 (very complex) and one sentence of reasoning."
)


def fast_route(query: str) -> RouteDecision | None:
    """A decision from keywords alone, or None when the model should be asked."""
    text = query.strip()
    if not text or _SIMPLE.match(text):
        return RouteDecision(Mode.SIMPLE, 0.05, "greeting or small talk", True)
    if _ARITHMETIC.match(text) and re.search(r"\d", text):
        return RouteDecision(Mode.SIMPLE, 0.1, "a single calculation", True)
    markers = {m.group(0).lower() for m in _COMPLEX_MARKERS.finditer(text)}
    if len(markers) >= COMPLEX_MARKER_COUNT:
        found = ", ".join(sorted(markers))
        complexity = min(1.0, 0.7 + 0.05 * len(markers))
        return RouteDecision(Mode.COMPLEX, complexity, f"multi-part task ({found})", True)
    return None


def mode_for(complexity: float) -> Mode:
    if complexity < 0.3:
        return Mode.SIMPLE
    return Mode.STANDARD if complexity < 0.7 else Mode.COMPLEX


def parse_route(raw: Mapping[str, Any]) -> RouteDecision:
    complexity = float(raw["estimated_complexity"])
    if math.isnan(complexity):
        raise ValueError("estimated_complexity is not a number")
    complexity = min(1.0, max(0.0, complexity))
    reasoning = str(raw.get("reasoning") or "")
    if not raw.get("mode"):
        return RouteDecision(mode_for(complexity), complexity, reasoning, False)
    mode = Mode(raw["mode"])
    if (mode is Mode.COMPLEX and complexity < CONSISTENT_COMPLEX) or (
        mode is Mode.SIMPLE and complexity >= CONSISTENT_SIMPLE
    ):
        # A mode its own estimate contradicts is a guess: the default is safer than either.
        reasoning = f"the model said {mode} at complexity {complexity:g}; running STANDARD"
        return RouteDecision(Mode.STANDARD, complexity, reasoning, False)
    return RouteDecision(mode, complexity, reasoning, False)


DEFAULT_ROUTE = RouteDecision(
    Mode.STANDARD, 0.5, "routing fell back to the default: no usable model answer", False
)


async def route(llm: LLM, query: str) -> RouteDecision:
    """Never fails: without a usable model answer the task goes STANDARD."""
    fast = fast_route(query)
    if fast is not None:
        return fast
    messages = [{"role": "system", "content": ROUTER_PROMPT}, {"role": "user", "content": query}]
    try:
        result = await structured_llm_call(
            llm,
            messages,
            ROUTE_SCHEMA,
            parse_fn=parse_route,
            schema_name="route_task",
            description="The execution mode and estimated complexity of the task.",
            default=DEFAULT_ROUTE,
        )
    except ContextOverflowError:
        return RouteDecision(Mode.COMPLEX, 0.9, "the task does not fit one model call", False)
    decision = result.value
    return RouteDecision(
        decision.mode,
        decision.estimated_complexity,
        decision.reasoning,
        False,
        result.usage,
    )
