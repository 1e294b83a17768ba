"""Domain records of the workflow log: what producers submit, what the log holds."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum

from shuttle.envelope import EPHEMERAL_TYPES
from shuttle.usage import TokenUsage


class WorkflowStatus(StrEnum):
    """Lifecycle of a workflow, derived from the lifecycle events of its log."""

    PENDING = "PENDING"
    RUNNING = "RUNNING"
    PAUSED = "PAUSED"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"

    @property
    def is_terminal(self) -> bool:
        return self in TERMINAL_STATUSES


TERMINAL_STATUSES = frozenset(
    {WorkflowStatus.COMPLETED, WorkflowStatus.FAILED, WorkflowStatus.CANCELLED}
)


@dataclass(frozen=True)
class WorkflowRecord:
    """One workflow's row: its tenant, lifecycle status, seq counter and outcome."""

    workflow_id: str
    tenant_id: str
    owner: str
    status: WorkflowStatus
    query: str
    session_id: str
    last_seq: int
    created_at: datetime
    updated_at: datetime
    result: str = ""
    error: str = ""
    usage: TokenUsage = field(default_factory=TokenUsage)
    duration_ms: int = 0
    stream_ended: bool = False
    lease_owner: str = ""
    lease_expires_at: datetime | None = None
    lease_epoch: int = 0
    takeovers: int = 0
    spec_json: str = ""


@dataclass(frozen=True)
class NewEvent:
    """An event as a producer submits it: the log assigns seq (and timestamp when None)."""

    type: str
    agent_id: str = ""
    message: str = ""
    payload_json: str = ""
    timestamp: datetime | None = None
    trace_id: str = ""
    # Set by payloads.shape_event when a TOOL_OBSERVATION result was cut for the stream:
    # the whole result, kept in SQL beside the event.
    full_result: str | None = None
    tool_name: str = ""


@dataclass(frozen=True)
class StoredEvent:
    """An event with its place in the log."""

    workflow_id: str
    seq: int
    type: str
    agent_id: str
    message: str
    payload_json: str
    timestamp: datetime
    trace_id: str

    @property
    def ephemeral(self) -> bool:
        """Held only in the hot tier, never in SQL."""
        return self.type in EPHEMERAL_TYPES


@dataclass(frozen=True)
class EventPage:
    """One page of history; ``next_seq`` is 0 when there is nothing after it."""

    events: list[StoredEvent]
    next_seq: int


@dataclass(frozen=True)
class Appended:
    """What an append did: the seqs of the batch, and the events to publish (none when the
    batch was a repeat of one already stored)."""

    events: list[StoredEvent]
    seqs: list[int]
    repeated: bool = False


@dataclass(frozen=True)
class AppendRequest:
    """One producer's batch for one workflow, as the log hands it to the store."""

    workflow_id: str
    tenant_id: str
    batch: Sequence[NewEvent]
    producer_id: str = ""
    batch_seq: int = 0
    # > 0: the batch is refused (Fenced) unless the workflow's lease is at this epoch.
    lease_epoch: int = 0
