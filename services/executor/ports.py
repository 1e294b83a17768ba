"""What the engine needs from the outside world, as typed ports (adapters live elsewhere)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Protocol

from services.executor.recovery.records import Recorded
from shuttle.llm.protocol import Message
from shuttle.tool_calls import ToolCall, ToolOutcome
from shuttle.usage import TokenUsage
from shuttle.workflow_log import EventDraft


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


class ToolPort(Protocol):
    """The tools service as the engine calls it."""

    async def list_tools(self, tenant_id: str) -> Sequence[ToolDefinition]: ...

    async def execute(self, call: ToolCall) -> ToolOutcome:
        """Never raises for a tool failure: the outcome carries the error for the model."""
        ...


class EventSink(Protocol):
    """Appends one workflow's events as one producer (numbering and resending its batches):
    the drafts, from the first, that one append takes (at least one); their seqs.

    Raises LogUnavailable once the events service stayed out of reach, LogClosed when the
    log already ended, AppendRefused for a batch the log refuses (shuttle.workflow_log)."""

    async def append(self, drafts: Sequence[EventDraft]) -> Sequence[int]: ...


@dataclass(frozen=True)
class Selection:
    """The tools a selection call chose, and what that call spent."""

    names: Sequence[str] | None
    """Names of the tools worth offering; None when selection failed."""
    usage: TokenUsage = field(default_factory=TokenUsage)


class ToolSelector(Protocol):
    async def select(
        self, workflow_id: str, query: str, tools: Sequence[ToolDefinition], max_tools: int
    ) -> Selection: ...


class LeaseRefused(Exception):
    """The run's lease belongs to someone else now, or its workflow has ended: stop the run."""


@dataclass(frozen=True)
class ClaimedRun:
    """A run this replica took over, as the events service answered the claim."""

    workflow_id: str
    tenant_id: str
    owner: str
    """Who asked for the run (not its executor)."""
    query: str
    session_id: str
    spec_json: str
    epoch: int
    """The lease epoch the run is this replica's at."""
    takeovers: int
    """Takeovers after a lapse so far, this one included (a hand-over is not counted)."""
    last_append_at: float
    """When the run's log last took an event (seconds since the epoch)."""


class RunLeases(Protocol):
    async def renew(
        self, workflow_id: str, tenant_id: str, owner: str, ttl_seconds: float, epoch: int = 0
    ) -> None:
        """Take or extend the lease for `ttl_seconds` (with `epoch`: only while that epoch
        holds it); LeaseRefused when it is not ours to have. Any other exception is
        transient (worth trying again)."""
        ...

    async def release(self, workflow_id: str, tenant_id: str, owner: str, epoch: int) -> None:
        """Hand the run over at once (another replica claims it at its next poll)."""
        ...

    async def claim(self, owner: str, ttl_seconds: float, limit: int) -> Sequence[ClaimedRun]:
        """Take over up to `limit` runs whose lease lapsed or was released."""
        ...


class RunLog(Protocol):
    async def read(self, workflow_id: str, tenant_id: str) -> Sequence[Recorded]:
        """The run's durable events in seq order, tool results whole."""
        ...


@dataclass(frozen=True)
class RunRequest:
    query: str
    tenant_id: str
    owner: str = ""
    session_id: str = ""
    mode: str = ""
    """SIMPLE, STANDARD or COMPLEX when the user forced one; empty lets the router decide."""
    budget_tokens: int = 0
    """This run's token budget; 0 keeps the deployment's default."""
    history: tuple[Message, ...] = ()
    """Earlier turns of the run's session, oldest first."""
    model: str = ""
    """A configured model's name the run uses instead of the default; empty: the default."""
    context: Mapping[str, Any] = field(default_factory=dict)
    """What the caller tells the agent about the task besides the query (a JSON object)."""

    def spec_json(self) -> str:
        """What the workflow keeps of the request beyond its query, tenant, owner and
        session, for whoever takes the run over."""
        return json.dumps(
            {
                "mode": self.mode,
                "model": self.model,
                "budget_tokens": self.budget_tokens,
                "context": dict(self.context),
                "history": list(self.history),
                "session_id": self.session_id,
            },
            ensure_ascii=False,
        )

    @classmethod
    def from_spec(cls, run: ClaimedRun) -> RunRequest:
        """The request of a run taken over (a run created without a spec: the defaults)."""
        spec: dict[str, Any] = json.loads(run.spec_json) if run.spec_json else {}
        return cls(
            query=run.query,
            tenant_id=run.tenant_id,
            owner=run.owner,
            session_id=str(spec.get("session_id") or run.session_id),
            mode=str(spec.get("mode") or ""),
            budget_tokens=int(spec.get("budget_tokens") or 0),
            history=tuple(spec.get("history") or ()),
            model=str(spec.get("model") or ""),
            context=dict(spec.get("context") or {}),
        )


class WorkflowRegistry(Protocol):
    async def create(
        self, request: RunRequest, *, lease_owner: str = "", lease_seconds: float = 0.0
    ) -> str:
        """Registers a workflow and returns its id; with `lease_owner`, leased to it (at
        epoch 1) for `lease_seconds`."""
        ...


MODES = ("SIMPLE", "STANDARD", "COMPLEX")
"""SIMPLE and STANDARD run the ReAct loop, COMPLEX a DAG."""


@dataclass(frozen=True)
class Route:
    mode: str
    estimated_complexity: float
    usage: TokenUsage = field(default_factory=TokenUsage)
    """What deciding the route spent (nothing when the caller chose the mode)."""


class Router(Protocol):
    async def route(
        self,
        workflow_id: str,
        query: str,
        requested_mode: str,
        tenant_id: str = "",
        within_seconds: float | None = None,
    ) -> Route:
        """The user's mode when they forced one, else the planner's estimate (STANDARD
        when none comes `within_seconds`, what is left of the run's deadline)."""
        ...
