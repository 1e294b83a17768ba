"""A tool call and what came of it, as the executor asks for it and the tools service
answers: the same types on both sides of ToolService.Execute."""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class ToolCall:
    """One tool call as an agent asked for it."""

    tool_name: str
    arguments_json: str = ""
    """JSON text of the arguments object, as the model wrote it; empty means {}."""
    call_id: str = ""
    workflow_id: str = ""
    tenant_id: str = ""
    agent_id: str = ""
    read_only: bool = False
    """The workflow runs in read-only mode: only read-only tools may run."""


@dataclass(frozen=True)
class Artifact:
    """A file or blob a tool produced, referenced by URI rather than inlined."""

    name: str
    mime_type: str = "application/octet-stream"
    size_bytes: int = 0
    uri: str = ""


@dataclass(frozen=True)
class DataProcessed:
    """How much data a tool worked through: the run's DATA_PROCESSING event."""

    operation: str
    bytes_processed: int
    records_processed: int | None = None
    """Records (array items, object members, lines) the tool went through, when it counts."""
    total_records: int | None = None
    processing_stage: str = "done"


@dataclass(frozen=True)
class ToolOutcome:
    """What came of a tool call. `observation` is what the model sees, success or not."""

    observation: str
    error: str = ""
    """Set when the call failed; the observation then explains the failure to the model."""
    blocked: bool = False
    block_reason: str = ""
    truncated: bool = False
    duration_ms: int = 0
    artifacts: tuple[Artifact, ...] = ()
    call_id: str = ""
    processed: DataProcessed | None = None
    """For a tool that works through data: how much it did."""

    @property
    def ok(self) -> bool:
        return not (self.error or self.blocked)


# The names the tools service gives artifacts; anything else names none (no path, no '..').
_ARTIFACT_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9_.-]{0,199}")


def artifact_name_ok(name: str) -> bool:
    return _ARTIFACT_NAME.fullmatch(name) is not None and ".." not in name
