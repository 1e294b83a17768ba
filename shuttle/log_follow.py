"""One workflow's log followed through EventService.StreamBatches, riding out restarts.

A call that fails with a transient status is opened again from the seq after the last event
it delivered, so the caller sees one unbroken sequence: no gap, no repeat. The gateway's SSE
feeds, its OpenAI-compatible stream and the executor's Run all read a log this way.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, Sequence

import grpc

from shuttle.envelope import type_value
from shuttle.grpc_client import tenant_metadata
from shuttle.v1 import common_pb2, events_pb2, events_pb2_grpc

STREAM_END = type_value("STREAM_END")
# A restarting events service refuses calls (UNAVAILABLE) or drops them as it stops.
TRANSIENT_CODES = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED})
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


async def follow(
    events: events_pb2_grpc.EventServiceAsyncStub,
    tenant: str,
    workflow_id: str,
    from_seq: int,
    retry_seconds: float,
) -> Upstream:
    """Every event from `from_seq` on (no type filter, so the caller knows where the log
    is), in batches, until STREAM_END; raises UpstreamError when it must stop."""
    next_seq = from_seq
    failing_since: float | None = None
    backoff = FIRST_BACKOFF_SECONDS
    while True:
        call = events.StreamBatches(
            events_pb2.StreamRequest(workflow_id=workflow_id, tenant_id=tenant, from_seq=next_seq),
            metadata=tenant_metadata(tenant),
        )
        try:
            async for batch in call:
                if not batch.events:
                    continue
                failing_since, backoff = None, FIRST_BACKOFF_SECONDS
                next_seq = batch.events[-1].seq + 1
                yield batch.events
                if batch.events[-1].type == STREAM_END:
                    return
            return  # the service ends a stream only after STREAM_END (or a log already over)
        except grpc.aio.AioRpcError as exc:
            code = exc.code()
            if code not in TRANSIENT_CODES:
                raise UpstreamError(code, str(exc.details())) from exc
            now = time.monotonic()
            failing_since = now if failing_since is None else failing_since
            if now - failing_since >= retry_seconds:
                raise UpstreamError(code, str(exc.details())) from exc
        finally:
            call.cancel()
        await asyncio.sleep(backoff)
        backoff = min(backoff * 2, LONGEST_BACKOFF_SECONDS)
