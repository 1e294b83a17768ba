"""What one run of the agent carries and returns."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from services.executor.engine.synthesis import ToolStep
from shuttle.llm.protocol import Message
from shuttle.usage import TokenUsage


@dataclass(frozen=True)
class RunContext:
    workflow_id: str
    tenant_id: str
    agent_id: str = "agent-main"
    history: tuple[Message, ...] = ()
    """Earlier turns of the session (user and assistant messages, oldest first)."""
    task_context: Mapping[str, Any] = field(default_factory=dict)
    """What the caller said about the task besides the query; every agent of the run sees it."""


@dataclass
class AgentResult:
    answer: str
    iterations: int
    usage: TokenUsage
    steps: list[ToolStep] = field(default_factory=list)
    duration_ms: int = 0
    budget_exceeded: bool = False
    interrupted: bool = False
    """Whether any user interrupt was injected."""
