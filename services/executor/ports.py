"""What the engine needs from the outside world, as typed ports (adapters live elsewhere)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Protocol


@dataclass(frozen=True)
class ToolDefinition:
    """One tool as offered to the model. A definition is shared by every run listing the
    same catalog, so neither it nor its schema may be modified."""

    name: str
    description: str
    parameters: Mapping[str, Any]

    def as_openai_tool(self) -> dict[str, Any]:
        return self._openai_tool

    @cached_property
    def _openai_tool(self) -> dict[str, Any]:
        # Built once per definition rather than once per run that offers the tool.
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
class Artifact:
    name: str
    mime_type: str = ""
    size_bytes: int = 0
    uri: str = ""


@dataclass(frozen=True)
class ToolOutcome:
    observation: str
    error: str = ""
    blocked: bool = False
    block_reason: str = ""
    truncated: bool = False
    duration_ms: int = 0
    artifacts: tuple[Artifact, ...] = ()

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
    """Appends batches to one workflow's log as one producer; returns the seqs of the
    drafts it appended: as many, from the first, as one append takes (at least one).

    Batches are numbered 1, 2, 3 ...; resending a batch with the same number and drafts
    must not duplicate it. Raises SinkUnavailable for a transient outage (worth retrying)
    and LogClosed when the log already ended.
    """

    async def append(self, drafts: Sequence[EventDraft], batch_seq: int) -> Sequence[int]: ...


class SinkUnavailable(Exception):
    """The events service could not be reached; the same batch may be resent."""


class LogClosed(Exception):
    """The workflow's log already holds STREAM_END."""


class ToolSelector(Protocol):
    async def select(
        self, workflow_id: str, query: str, tools: Sequence[ToolDefinition], max_tools: int
    ) -> Sequence[str] | None:
        """Names of the tools worth offering for `query`; None when selection failed."""
        ...


class LeaseRefused(Exception):
    """The run's lease belongs to someone else now, or its workflow has ended: stop the run."""


class RunLeases(Protocol):
    async def renew(self, workflow_id: str, tenant_id: str, owner: str, ttl_seconds: float) -> None:
        """Take or extend the lease for `ttl_seconds`; LeaseRefused when it is not ours to
        have. Any other exception is transient (worth trying again)."""
        ...
