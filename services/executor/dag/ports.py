"""What the DAG engine needs from the planner and the model registry, as typed ports."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from services.executor.dag.plan import PlannedRound
from services.executor.ports import ToolDefinition
from shuttle.llm.protocol import LLM
from shuttle.plans import Analysis, StepResult


class PlanningFailed(Exception):
    """The planner gave no usable plan; the message says why."""


class DagPlanner(Protocol):
    async def plan(
        self, workflow_id: str, query: str, tools: Sequence[ToolDefinition], context: str
    ) -> PlannedRound:
        """Raises PlanningFailed when no valid plan can be had."""
        ...

    async def analyze(
        self, workflow_id: str, query: str, results: Sequence[StepResult]
    ) -> Analysis | None:
        """None when the analysis could not be had (the round's results then stand)."""
        ...


class ModelPicker(Protocol):
    @property
    def names(self) -> list[str]: ...

    def by_name(self, name: str) -> LLM | None: ...

    def for_role(self, role: str) -> LLM: ...
