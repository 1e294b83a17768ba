"""Client channels to other Shuttle services."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc

from shuttle.grpc_tracing import client_interceptors

CHANNEL_OPTIONS = [
    ("grpc.keepalive_time_ms", 30_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.max_receive_message_length", 16 * 1024 * 1024),
]


def open_channel(target: str) -> grpc.aio.Channel:
    """A channel whose calls carry the caller's trace context to the service."""
    return grpc.aio.insecure_channel(
        target, options=CHANNEL_OPTIONS, interceptors=client_interceptors()
    )


# The caller's tenant, set by the gateway (and passed on by every service that calls another
# on a caller's behalf). Services check it against any tenant_id field of the request.
TENANT_METADATA_KEY = "x-shuttle-tenant"


def tenant_metadata(tenant_id: str) -> tuple[tuple[str, str], ...]:
    """Call metadata carrying `tenant_id`."""
    return ((TENANT_METADATA_KEY, tenant_id),)


_STATUS_CODES = {code.value[0]: code for code in grpc.StatusCode}


def status_code(number: int) -> grpc.StatusCode:
    """The status code a number sent in a message stands for (UNKNOWN if gRPC has none)."""
    return _STATUS_CODES.get(number, grpc.StatusCode.UNKNOWN)


def dropped_by_grpc() -> bool:
    """Called on a CancelledError out of a call whose requests are a stream: whether gRPC
    dropped the call rather than someone cancelling this task. grpc.aio cancels such a call
    itself when it cannot send the requests (seen with the server gone), and the reader then
    gets CancelledError, not an AioRpcError."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() == 0


class NoAnswer(Exception):
    """The server could not be asked (out of reach, or an error other than UNIMPLEMENTED)."""


# A server that answers at all answers this at once.
IMPLEMENTS_TIMEOUT_SECONDS = 10.0


async def implements(
    open_call: Callable[[AsyncIterator[Any]], grpc.aio.StreamStreamCall[Any, Any]],
    timeout_seconds: float = IMPLEMENTS_TIMEOUT_SECONDS,
) -> bool:
    """Whether the server implements a bidirectional method, asked with a call that sends
    nothing: a call that sends requests to a server without the method may fail with
    INTERNAL rather than UNIMPLEMENTED (a race in gRPC between the client's writes and the
    server's refusal). Raises NoAnswer."""
    call = open_call(_no_requests())
    try:
        async with asyncio.timeout(timeout_seconds):
            async for _ in call:
                pass
    except grpc.aio.AioRpcError as exc:
        if exc.code() == grpc.StatusCode.UNIMPLEMENTED:
            return False
        raise NoAnswer(f"{exc.code().name}: {exc.details()}") from exc
    except asyncio.CancelledError:
        if not dropped_by_grpc():
            raise
        raise NoAnswer("CANCELLED: the server is out of reach") from None
    except TimeoutError:
        raise NoAnswer(f"DEADLINE_EXCEEDED: no answer in {timeout_seconds} s") from None
    finally:
        call.cancel()
    return True


async def _no_requests() -> AsyncIterator[Any]:
    return
    yield
