"""Markdown tables and number formats for the report."""

# ruff: noqa: RUF001, RUF002  (the rendered markdown uses typographic multiplication and dashes)

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any


def number(value: Any, digits: int = 0) -> str:
    """A figure with thousands separators; a dash when missing or not a number."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    return f"{float(value):,.{digits}f}"


def by_process(cpu_ms: dict[str, float], digits: int = 1) -> str:
    """`events 4.1, executor 6.0`: each process that used any CPU (a process a run never
    reaches, such as the planner over `Run`, reads 0.0 and is left out)."""
    return ", ".join(f"{name} {number(ms, digits)}" for name, ms in cpu_ms.items() if ms >= 0.05)


def spread(values: dict[str, float] | None, digits: int = 2) -> str:
    """`median (p25–p75)` of a saved Spread."""
    if not values:
        return "—"
    return (
        f"{number(values['median'], digits)} "
        f"({number(values['p25'], digits)}–{number(values['p75'], digits)})"
    )


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], align: str = "") -> str:
    """A pipe table; `align` has one letter per column, l or r (default: first l, rest r)."""
    align = align or "l" + "r" * (len(headers) - 1)
    rule = ["---" if a == "l" else "---:" for a in align]
    lines = [headers, rule, *rows]
    return "\n".join("| " + " | ".join(line) + " |" for line in lines)


def verdict(met: bool | None) -> str:
    return {True: "**met**", False: "**not met**", None: "not measured"}[met]
