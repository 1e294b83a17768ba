"""How the events service's errors end a gRPC call: the status each stands for, with a message
that never carries a stack trace."""

from __future__ import annotations

import logging
from collections.abc import Awaitable
from typing import Any, NoReturn, TypeVar

import grpc
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError, SQLAlchemyError

from .errors import (
    AlreadyExists,
    EventsError,
    FailedPrecondition,
    Fenced,
    InvalidArgument,
    NotFound,
    ResourceExhausted,
)
from .roles import PermissionDenied

log = logging.getLogger(__name__)

_T = TypeVar("_T")
ServicerContext = grpc.aio.ServicerContext[Any, Any]

_CODES: dict[type[EventsError], grpc.StatusCode] = {
    NotFound: grpc.StatusCode.NOT_FOUND,
    InvalidArgument: grpc.StatusCode.INVALID_ARGUMENT,
    FailedPrecondition: grpc.StatusCode.FAILED_PRECONDITION,
    AlreadyExists: grpc.StatusCode.ALREADY_EXISTS,
    Fenced: grpc.StatusCode.ABORTED,
    ResourceExhausted: grpc.StatusCode.RESOURCE_EXHAUSTED,
    PermissionDenied: grpc.StatusCode.PERMISSION_DENIED,
}

# SQLSTATE classes of a database that is down or on its way up: connection exception (08)
# and operator intervention (57: shutting down, crashed, "the database system is starting up").
_TRANSIENT_SQLSTATE_CLASSES = ("08", "57")


def storage_unavailable(exc: BaseException) -> bool:
    """Whether a storage failure is the database being out of reach for now (a retry by the
    caller, whose appends are idempotent, will do) rather than a fault in the request."""
    if isinstance(exc, OSError | OperationalError | InterfaceError):
        return True  # refused connection, locked SQLite, pooled connection closed by a restart
    if isinstance(exc, DBAPIError):
        sqlstate = str(getattr(exc.orig, "sqlstate", None) or "")
        return exc.connection_invalidated or sqlstate[:2] in _TRANSIENT_SQLSTATE_CLASSES
    return False


def status_of(exc: Exception, what: str) -> tuple[grpc.StatusCode, str]:
    """The status `exc` stands for and its message; a storage fault is logged here."""
    if isinstance(exc, EventsError):
        return _CODES.get(type(exc), grpc.StatusCode.INTERNAL), str(exc)
    log.error("%s failed", what, exc_info=exc)
    if storage_unavailable(exc):
        return grpc.StatusCode.UNAVAILABLE, "event storage is unavailable; retry"
    return grpc.StatusCode.INTERNAL, "event storage failed; see the events log"


async def abort_with(context: ServicerContext, exc: Exception) -> NoReturn:
    """End the RPC with the status `exc` stands for."""
    await context.abort(*status_of(exc, "storage"))
    raise AssertionError("context.abort returned")


async def answered(context: ServicerContext, operation: Awaitable[_T]) -> _T:
    """`operation`'s result, or the RPC ended with the status of its error."""
    try:
        return await operation
    except (EventsError, SQLAlchemyError, OSError) as exc:
        await abort_with(context, exc)
