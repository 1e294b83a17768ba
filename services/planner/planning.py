"""DAG plans: steps with dependencies, asked of the model and then checked.

A plan is repaired where the intent is plain (missing ids, a dependency given as a string
or as a 1-based step number, `depends_on` for `dependencies`, self-dependencies) and
rejected with a clear message where it is not (no steps, a step without a task or whose
task has no words, duplicate ids, unknown dependencies, cycles).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from services.planner.selection import ToolInfo, compact_catalog
from services.planner.structured import StructuredLevel, structured_llm_call
from shuttle.llm.protocol import LLM
from shuttle.plans import PlanError, PlanStep, check_plan
from shuttle.usage import TokenUsage

MAX_STEPS = 20
_LETTER = re.compile(r"[^\W\d_]")
"""A task is words; `":{"` (a small model's fragment of JSON) is not."""

# Lenient on purpose: ids and dependencies are checked (and repaired) by `validate_plan`,
# so that a near-miss is fixed instead of sending the model round again.
PLAN_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "steps": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "properties": {
                    "id": {"type": ["string", "integer"]},
                    "task": {"type": "string"},
                    "dependencies": {
                        "type": ["array", "string"],
                        "items": {"type": ["string", "integer"]},
                    },
                    "tool_hint": {"type": "string"},
                    "model_hint": {"type": "string"},
                },
                "required": ["task"],
            },
        }
    },
    "required": ["steps"],
}

PLANNER_PROMPT = (
    "You plan how to solve a task as a small set of steps that can run in parallel where "
    "they do not depend on each other. Each step has a short unique id (s1, s2, …), a task "
    "an agent can do on its own, the ids of the steps whose results it needs "
    "(dependencies), and optionally the tool it will mostly use (tool_hint) and the model "
    "it should run on (model_hint). Use as few steps as the task needs "
    f"(at most {MAX_STEPS}); no cycles."
)


@dataclass(frozen=True)
class Plan:
    steps: tuple[PlanStep, ...]
    repairs: tuple[str, ...] = ()


@dataclass(frozen=True)
class PlanOutcome:
    plan: Plan
    usage: TokenUsage
    level: StructuredLevel
    attempts: int


def validate_plan(raw: Mapping[str, Any], max_steps: int = MAX_STEPS) -> Plan:
    """The checked plan; raises PlanError naming the problem."""
    items = raw.get("steps")
    if not isinstance(items, list) or not items:
        raise PlanError("the plan has no steps")
    if len(items) > max_steps:
        raise PlanError(f"the plan has {len(items)} steps; at most {max_steps} are allowed")
    repairs: list[str] = []
    given_ids = {str(s.get("id")).strip() for s in items if isinstance(s, dict) and s.get("id")}
    drafts: list[dict[str, Any]] = []
    for index, item in enumerate(items):
        if not isinstance(item, dict):
            raise PlanError(f"steps[{index}] is not an object")
        step_id = str(item.get("id") if item.get("id") is not None else "").strip()
        if not step_id:
            step_id = _fresh_id(index, given_ids)
            given_ids.add(step_id)
            repairs.append(f"steps[{index}] had no id; named it {step_id!r}")
        task = str(item.get("task") or "").strip()
        if not task:
            raise PlanError(f"step {step_id!r} has no task")
        if not _LETTER.search(task):
            raise PlanError(f"step {step_id!r}: {task[:40]!r} is not a task (it has no words)")
        deps = _dependencies(item, step_id, repairs)
        drafts.append(
            {
                "id": step_id,
                "task": task,
                "deps": deps,
                "tool_hint": str(item.get("tool_hint") or ""),
                "model_hint": str(item.get("model_hint") or ""),
            }
        )
    ids = {draft["id"] for draft in drafts}
    for draft in drafts:
        resolved: list[str] = []
        for dep in draft["deps"]:
            if dep not in ids and dep.isdigit() and 1 <= int(dep) <= len(drafts):
                # "2" where no step has that id: the model counted steps from 1.
                target = drafts[int(dep) - 1]["id"]
                repairs.append(f"step {draft['id']!r}: read dependency {dep!r} as {target!r}")
                dep = target
            if dep != draft["id"] and dep not in resolved:
                resolved.append(dep)
        draft["deps"] = resolved
    steps = tuple(
        PlanStep(d["id"], d["task"], tuple(d["deps"]), d["tool_hint"], d["model_hint"])
        for d in drafts
    )
    check_plan(steps)
    return Plan(steps, tuple(repairs))


def _fresh_id(index: int, taken: set[str]) -> str:
    candidate = f"s{index + 1}"
    while candidate in taken:
        candidate += "_"
    return candidate


def _dependencies(item: Mapping[str, Any], step_id: str, repairs: list[str]) -> list[str]:
    value = item.get("dependencies")
    if value is None and "depends_on" in item:
        value = item["depends_on"]
        repairs.append(f"step {step_id!r}: read 'depends_on' as 'dependencies'")
    if value is None:
        return []
    if isinstance(value, str | int):
        value = [value] if str(value).strip() else []
        repairs.append(f"step {step_id!r}: dependencies was a single value; made it a list")
    if not isinstance(value, list):
        raise PlanError(f"step {step_id!r}: dependencies must be a list of step ids")
    deps: list[str] = []
    for dep in value:
        name = str(dep).strip()
        if name == step_id:
            repairs.append(f"step {step_id!r}: dropped its dependency on itself")
        elif name and name not in deps:
            deps.append(name)
    return deps


ModelEntry = tuple[str, Sequence[str]]
"""A model a step may run on: its name and roles."""


def model_roster(models: Sequence[ModelEntry]) -> str:
    """The models a plan may hint at, one a line; empty when there is no choice to make."""
    if len(models) < 2:
        return ""
    lines = [f"- {name} (roles: {', '.join(roles) or 'none'})" for name, roles in models]
    return (
        "\n\nModels the steps can run on (set model_hint to one of these names for a step "
        "that suits its roles; leave it empty for the default):\n" + "\n".join(lines)
    )


def plan_messages(
    query: str, tools: Sequence[ToolInfo], context: str, models: Sequence[ModelEntry] = ()
) -> list[dict[str, Any]]:
    system = PLANNER_PROMPT
    if tools:
        system += f"\n\nTools the agents can use:\n{compact_catalog(tools)}"
    system += model_roster(models)
    user = f"Task: {query}"
    if context:
        user += f"\n\nResults so far (plan only what is still missing):\n{context}"
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


async def make_plan(
    llm: LLM,
    query: str,
    tools: Sequence[ToolInfo] = (),
    context: str = "",
    models: Sequence[ModelEntry] = (),
) -> PlanOutcome:
    """Raises StructuredOutputError (whose message carries the last PlanError) if no level
    produced a usable plan. `models` are those the steps may name in `model_hint` (the
    executor runs a step whose hint names none of its models on the default one)."""
    result = await structured_llm_call(
        llm,
        plan_messages(query, tools, context, models),
        PLAN_SCHEMA,
        parse_fn=validate_plan,
        schema_name="submit_plan",
        description="The plan: a list of steps with their dependencies.",
    )
    return PlanOutcome(result.value, result.usage, result.level, result.attempts)
