"""Client channels to other Shuttle services, carrying the caller's credential on every call."""

from __future__ import annotations

import asyncio
from collections import namedtuple
from typing import Any

import grpc

from shuttle.grpc_auth import AUTHORIZATION, NO_CREDENTIAL, ChannelAuth
from shuttle.grpc_service_config import SERVICE_CONFIG_OPTIONS
from shuttle.grpc_tracing import client_interceptors

# Every channel balances round_robin over its target's addresses and retries the idempotent
# calls of Shuttle's services (grpc_service_config.py); a target is one address, an
# ipv4:/ipv6: list or a DNS name (grpc_targets.py).
CHANNEL_OPTIONS = [
    ("grpc.keepalive_time_ms", 30_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.max_receive_message_length", 16 * 1024 * 1024),
    # round_robin keeps reconnecting to a replica that went away, backing off each time (to
    # two minutes by default): capped at a second, a replica that restarts is back in turn
    # within one, as the retries above expect.
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1_000),
    *SERVICE_CONFIG_OPTIONS,
]


def open_channel(
    target: str, auth: ChannelAuth = NO_CREDENTIAL, *, traced: bool = True
) -> grpc.aio.Channel:
    """A channel whose calls carry `auth` (over TLS when it has certificates) and, unless
    `traced` is False, the caller's trace context to the service. A channel to anything but
    Shuttle's own services (a tool provider) keeps the default: no credential of ours; it
    balances over the provider's addresses too, and retries none of its methods."""
    interceptors = [*(client_interceptors() if traced else ()), *_bearers(auth)]
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
    if not auth.authorization:
        return channel
    return grpc.intercept_channel(channel, _BlockingBearer(auth.authorization))


def _bearers(auth: ChannelAuth) -> list[Any]:
    if not auth.authorization:
        return []
    pair = ((AUTHORIZATION, auth.authorization),)
    return [kind(pair) for kind in _AIO_BEARERS]


class _AioBearer:
    """Adds the credential to a call's metadata; one subclass per call kind, since an aio
    channel files each interceptor under the first kind it is an instance of."""

    def __init__(self, pair: tuple[tuple[str, str], ...]) -> None:
        self._pair = pair

    async def _intercept(self, continuation: Any, details: Any, request: Any) -> Any:
        metadata = grpc.aio.Metadata(*tuple(details.metadata or ()), *self._pair)
        details = grpc.aio.ClientCallDetails(
            details.method, details.timeout, metadata, details.credentials, details.wait_for_ready
        )
        return await continuation(details, request)


class _UnaryUnaryBearer(_AioBearer, grpc.aio.UnaryUnaryClientInterceptor):
    async def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        return await self._intercept(continuation, details, request)


class _UnaryStreamBearer(_AioBearer, grpc.aio.UnaryStreamClientInterceptor):
    async def intercept_unary_stream(self, continuation: Any, details: Any, request: Any) -> Any:
        return await self._intercept(continuation, details, request)


class _StreamUnaryBearer(_AioBearer, grpc.aio.StreamUnaryClientInterceptor):
    async def intercept_stream_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        return await self._intercept(continuation, details, request)


class _StreamStreamBearer(_AioBearer, grpc.aio.StreamStreamClientInterceptor):
    async def intercept_stream_stream(self, continuation: Any, details: Any, request: Any) -> Any:
        return await self._intercept(continuation, details, request)


_AIO_BEARERS = (_UnaryUnaryBearer, _UnaryStreamBearer, _StreamUnaryBearer, _StreamStreamBearer)


class _BlockingDetails(
    namedtuple(  # grpc's own way to give a call new metadata
        "_BlockingDetails",
        ("method", "timeout", "metadata", "credentials", "wait_for_ready", "compression"),
    ),
    grpc.ClientCallDetails,
):
    pass


class _BlockingBearer(
    grpc.UnaryUnaryClientInterceptor,
    grpc.UnaryStreamClientInterceptor,
    grpc.StreamUnaryClientInterceptor,
    grpc.StreamStreamClientInterceptor,
):
    """The same for a blocking channel (probes, scripts), whose interceptors may be all four."""

    def __init__(self, authorization: str) -> None:
        self._pair = (AUTHORIZATION, authorization)

    def _intercept(self, continuation: Any, details: Any, request: Any) -> Any:
        metadata = (*tuple(details.metadata or ()), self._pair)
        return continuation(
            _BlockingDetails(
                details.method,
                details.timeout,
                metadata,
                details.credentials,
                getattr(details, "wait_for_ready", None),
                getattr(details, "compression", None),
            ),
            request,
        )

    def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        return self._intercept(continuation, details, request)

    def intercept_unary_stream(self, continuation: Any, details: Any, request: Any) -> Any:
        return self._intercept(continuation, details, request)

    def intercept_stream_unary(self, continuation: Any, details: Any, requests: Any) -> Any:
        return self._intercept(continuation, details, requests)

    def intercept_stream_stream(self, continuation: Any, details: Any, requests: Any) -> Any:
        return self._intercept(continuation, details, requests)


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
