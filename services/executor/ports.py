"""What the engine needs from the outside world, as typed ports (adapters live elsewhere)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True)
class ToolDefinition:
    name: str
    description: str
    parameters: Mapping[str, Any]

    def as_openai_tool(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": dict(self.parameters),
            },
        }


@dataclass(frozen=True)
class ToolInvocation:
    workflow_id: str
    tenant_id: str
    agent_id: str
    call_id: str
    name: str
    arguments_json: str


@dataclass(frozen=True)
class ToolOutcome:
    observation: str
    error: str = ""
    blocked: bool = False
    block_reason: str = ""
    truncated: bool = False
    duration_ms: int = 0

    @property
    def ok(self) -> bool:
        return not (self.error or self.blocked)


class ToolHost(Protocol):
    async def list_tools(self, tenant_id: str) -> Sequence[ToolDefinition]: ...

    async def execute(self, call: ToolInvocation) -> ToolOutcome:
        """Never raises for a tool failure: the outcome carries the error for the model."""
        ...


@dataclass(frozen=True)
class EventDraft:
    type: str
    message: str
    payload: Mapping[str, Any] = field(default_factory=dict)
    agent_id: str = ""


class EventSink(Protocol):
    """Appends events to one workflow's log, in call order; returns their seqs."""

    async def append(self, drafts: Sequence[EventDraft]) -> Sequence[int]: ...
