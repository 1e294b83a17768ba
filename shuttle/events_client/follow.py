"""One workflow's log followed through EventService.StreamBatches, riding out restarts.

A call that fails with a transient status is opened again from the seq after the last event
it delivered, so the caller sees one unbroken sequence: no gap, no repeat. The retry window
opens at the first failure after the log last moved on, so a long run that meets several
restarts is not given up on for the sum of their outages.
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, Collection, Sequence

import grpc
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception

from shuttle.envelope import type_value
from shuttle.grpc_client import STREAM_RETRYABLE_CODES, tenant_metadata
from shuttle.v1 import common_pb2, events_pb2, events_pb2_grpc

STREAM_END = type_value("STREAM_END")
FIRST_BACKOFF_SECONDS = 0.05
LONGEST_BACKOFF_SECONDS = 1.0

Upstream = AsyncGenerator[Sequence[common_pb2.Event], None]


class UpstreamError(Exception):
    """The log cannot be followed: a status that retrying cannot change, or the events
    service stayed unreachable for the whole retry window."""

    def __init__(self, status: grpc.StatusCode, message: str) -> None:
        super().__init__(f"{status.name.lower()}: {message}")
        self.status = status
        self.code = status.name.lower()
        self.message = message


class _RetryWindow:
    """Failures since the log last moved on: how long they have lasted, how long to wait."""

    def __init__(self, seconds: float) -> None:
        self._seconds = seconds
        self._since: float | None = None
        self._failures = 0

    def moved_on(self) -> None:
        self._since = None
        self._failures = 0

    def failed(self, _state: RetryCallState) -> None:
        if self._since is None:
            self._since = time.monotonic()
        self._failures += 1

    def exhausted(self, _state: RetryCallState) -> bool:
        return self._since is not None and time.monotonic() - self._since >= self._seconds

    def backoff(self, _state: RetryCallState) -> float:
        delay: float = FIRST_BACKOFF_SECONDS * 2 ** (self._failures - 1)
        return min(delay, LONGEST_BACKOFF_SECONDS)


def _transient(error: BaseException) -> bool:
    return isinstance(error, grpc.aio.AioRpcError) and error.code() in STREAM_RETRYABLE_CODES


async def follow(
    stub: events_pb2_grpc.EventServiceAsyncStub,
    tenant: str,
    workflow_id: str,
    from_seq: int,
    retry_seconds: float,
    types: Collection[str] = (),
) -> Upstream:
    """Every event from `from_seq` on (of `types`, when given), in batches, until
    STREAM_END, which is always delivered; raises UpstreamError when it must stop."""
    next_seq = from_seq
    window = _RetryWindow(retry_seconds)
    type_values = [type_value(name) for name in types]
    retrying = AsyncRetrying(
        retry=retry_if_exception(_transient),
        after=window.failed,
        stop=window.exhausted,
        wait=window.backoff,
        reraise=True,
    )
    try:
        async for attempt in retrying:
            with attempt:
                call = stub.StreamBatches(
                    events_pb2.StreamRequest(
                        workflow_id=workflow_id,
                        tenant_id=tenant,
                        from_seq=next_seq,
                        types=type_values,
                    ),
                    metadata=tenant_metadata(tenant),
                )
                try:
                    async for batch in call:
                        if not batch.events:
                            continue
                        window.moved_on()
                        next_seq = batch.events[-1].seq + 1
                        yield batch.events
                        if batch.events[-1].type == STREAM_END:
                            return
                finally:
                    call.cancel()
                # The service ends a stream only after STREAM_END (or a log already over).
    except grpc.aio.AioRpcError as exc:
        raise UpstreamError(exc.code(), str(exc.details())) from exc
