"""Domain errors of the events service; the gRPC adapter maps each to a status code."""

from __future__ import annotations


class EventsError(Exception):
    """Base of every error the events domain raises on purpose; the message is user-facing."""


class NotFound(EventsError):
    """No such workflow for this tenant (another tenant's workflow looks exactly the same)."""


class InvalidArgument(EventsError):
    """The request itself is malformed: fix it and retry."""


class FailedPrecondition(EventsError):
    """The request is well formed but the workflow's state refuses it (e.g. its log has ended)."""


class AlreadyExists(EventsError):
    """A workflow with this id already exists."""


class Fenced(EventsError):
    """The batch carries a lease epoch the workflow's lease has moved past: another executor
    took the run over, and the caller must stop it without appending."""


class ResourceExhausted(EventsError):
    """A bound on what a tenant may hold at once is reached: wait for some of it to end."""
