"""Client channels to other Shuttle services."""

from __future__ import annotations

import asyncio

import grpc

from shuttle.grpc_auth import NO_CREDENTIAL, ChannelAuth
from shuttle.grpc_tracing import client_interceptors

CHANNEL_OPTIONS = [
    ("grpc.keepalive_time_ms", 30_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.max_receive_message_length", 16 * 1024 * 1024),
]


def open_channel(
    target: str, auth: ChannelAuth = NO_CREDENTIAL, *, traced: bool = True
) -> grpc.aio.Channel:
    """A channel whose calls carry `auth` (over TLS when it has certificates) and, unless
    `traced` is False, the caller's trace context to the service. A channel to anything but
    Shuttle's own services (a tool provider) keeps the default: no credential of ours."""
    interceptors = [*(client_interceptors() if traced else ()), *auth.aio_interceptors()]
    credentials = auth.channel_credentials()
    if credentials is None:
        return grpc.aio.insecure_channel(
            target, options=CHANNEL_OPTIONS, interceptors=interceptors or None
        )
    return grpc.aio.secure_channel(
        target, credentials, options=CHANNEL_OPTIONS, interceptors=interceptors or None
    )


def open_blocking_channel(target: str, auth: ChannelAuth = NO_CREDENTIAL) -> grpc.Channel:
    """The same for code without an event loop (start-up probes, scripts)."""
    credentials = auth.channel_credentials()
    channel = (
        grpc.insecure_channel(target, options=CHANNEL_OPTIONS)
        if credentials is None
        else grpc.secure_channel(target, credentials, options=CHANNEL_OPTIONS)
    )
    interceptor = auth.blocking_interceptor()
    return channel if interceptor is None else grpc.intercept_channel(channel, interceptor)


# The caller's tenant, set by the gateway (and passed on by every service that calls another
# on a caller's behalf). Services check it against any tenant_id field of the request.
TENANT_METADATA_KEY = "x-shuttle-tenant"


def tenant_metadata(tenant_id: str) -> tuple[tuple[str, str], ...]:
    """Call metadata carrying `tenant_id`."""
    return ((TENANT_METADATA_KEY, tenant_id),)


# A restarting server refuses calls (UNAVAILABLE) or does not answer in time: a unary call
# made again reaches it, or another replica, once it is back.
RETRYABLE_CODES = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED})
# A stopping server also drops the streams it is serving (CANCELLED); a stream opened again
# from where it broke off loses nothing.
STREAM_RETRYABLE_CODES = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED})

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
