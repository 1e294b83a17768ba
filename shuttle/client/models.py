"""What the client hands back: typed events and tasks, and the one error it raises."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any


class ShuttleError(Exception):
    """A refusal or failure of the gateway: its HTTP status (0: not reached) and message."""

    def __init__(self, status: int, message: str, code: str = "") -> None:
        super().__init__(f"{status}: {message}" if status else message)
        self.status = status
        self.message = message
        self.code = code


def _time(text: str | None) -> datetime | None:
    # Python 3.11's fromisoformat takes the trailing Z of the gateway's timestamps.
    return datetime.fromisoformat(text) if text else None


@dataclass(frozen=True)
class Event:
    """One event of a run's log, as the gateway's envelope carries it."""

    seq: int
    type: str
    """Bare type name: WORKFLOW_STARTED, TOOL_INVOKED, …, STREAM_END."""
    workflow_id: str
    agent_id: str = ""
    message: str = ""
    timestamp: datetime | None = None
    payload: dict[str, Any] = field(default_factory=dict)
    trace_id: str = ""

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Event:
        return cls(
            seq=int(data["seq"]),
            type=str(data["type"]),
            workflow_id=str(data.get("workflow_id", "")),
            agent_id=str(data.get("agent_id", "")),
            message=str(data.get("message", "")),
            timestamp=_time(data.get("timestamp")),
            payload=dict(data.get("payload") or {}),
            trace_id=str(data.get("trace_id", "")),
        )


@dataclass(frozen=True)
class Frame:
    """One frame of the ReAct channel dialect: its channel (step, answer, done, …), data and
    the seq of the event it came from (0 for frames that follow no event)."""

    channel: str
    data: dict[str, Any]
    seq: int = 0


@dataclass(frozen=True)
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int = 0


@dataclass(frozen=True)
class Task:
    """A task's status, outcome, usage and timings."""

    workflow_id: str
    status: str
    """pending, running, paused, completed, failed or cancelled."""
    query: str
    result: str
    error: str
    usage: Usage
    cost_usd: float
    created_at: datetime | None
    updated_at: datetime | None
    duration_ms: int
    last_seq: int
    session_id: str

    @property
    def finished(self) -> bool:
        return self.status in ("completed", "failed", "cancelled")

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Task:
        return cls(
            workflow_id=str(data["workflow_id"]),
            status=str(data["status"]),
            query=str(data.get("query", "")),
            result=str(data.get("result", "")),
            error=str(data.get("error", "")),
            usage=Usage(**{k: int(v) for k, v in (data.get("usage") or {}).items()}),
            cost_usd=float(data.get("cost_usd") or 0.0),
            created_at=_time(data.get("created_at")),
            updated_at=_time(data.get("updated_at")),
            duration_ms=int(data.get("duration_ms") or 0),
            last_seq=int(data.get("last_seq") or 0),
            session_id=str(data.get("session_id", "")),
        )


@dataclass(frozen=True)
class TaskSummary:
    """A task as the task list shows it."""

    workflow_id: str
    status: str
    query: str
    result: str
    created_at: datetime | None

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TaskSummary:
        return cls(
            workflow_id=str(data["workflow_id"]),
            status=str(data["status"]),
            query=str(data.get("query", "")),
            result=str(data.get("result", "")),
            created_at=_time(data.get("created_at")),
        )
