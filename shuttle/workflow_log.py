"""What every producer and reader of a workflow's log shares, free of gRPC: the draft of an
event, a command read back from the log, the watches of a command feed, and the ways an
append can fail."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class EventDraft:
    """An event as a producer writes it, stamped when it was made; the events service gives
    it its seq."""

    type: str
    message: str
    payload: Mapping[str, Any] = field(default_factory=dict)
    agent_id: str = ""
    at: float = field(default_factory=time.time)
    """When it happened (seconds since the epoch): not when a batch carried it."""


@dataclass(frozen=True)
class LogCommand:
    """A control event or a user's message, as the run it is meant for reads it."""

    seq: int
    type: str
    payload: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Watch:
    workflow_id: str
    tenant_id: str
    from_seq: int


@dataclass(frozen=True)
class Unwatch:
    workflow_id: str


WatchRequest = Watch | Unwatch


@dataclass(frozen=True)
class FeedItem:
    """What one watch brought: commands in seq order, and/or the end of the watch."""

    workflow_id: str
    commands: tuple[LogCommand, ...] = ()
    ended: bool = False
    """The log reached STREAM_END."""
    error: str = ""
    """The watch failed and is over."""
    retryable: bool = False
    """The failure is the log being out of reach for now: watch again later."""


class LogUnavailable(Exception):
    """The events service could not be reached for now; the same call may be made again
    (an append resent under its batch number is not stored twice)."""


class LogClosed(Exception):
    """The workflow's log already holds STREAM_END."""


class AppendRefused(Exception):
    """The events service refused a batch for good (a fault in the batch or the request)."""

    def __init__(self, status: str, details: str) -> None:
        super().__init__(f"{status}: {details}")
        self.status = status
        """The gRPC status name it refused the batch with (INVALID_ARGUMENT, NOT_FOUND…)."""


class LogFenced(AppendRefused):
    """The run's lease moved past the producer's epoch: another executor took the run over
    (or the events service is ending it). The batch was not stored; the producer must stop
    the run without appending more. Never resent."""

    def __init__(self, details: str) -> None:
        super().__init__("ABORTED", details)
