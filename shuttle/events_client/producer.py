"""Appending to one workflow's log as one producer, without loss or duplication.

Each batch carries the producer's id and a batch number that grows by one. A failure that
leaves unknown whether the batch was stored (the events service restarting, an answer that
did not come in time) is ridden out by resending the same batch under the same number, which
the events service answers with the first seqs instead of storing it twice. Events are cut
to a size the log takes and a batch to as many events as one Append takes (`sizes.py`).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence

import grpc
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception_type,
    stop_before_delay,
    wait_exponential,
)

from shuttle.envelope import type_value
from shuttle.events_client.append_stream import AppendStream, AppendStreamBroken
from shuttle.events_client.sizes import (
    BATCH_MAX_BYTES,
    EVENT_MAX_BYTES,
    EncodedDraft,
    encode,
    first_batch,
)
from shuttle.grpc_client import RETRYABLE_CODES, status_code, tenant_metadata
from shuttle.v1 import common_pb2, events_pb2, events_pb2_grpc
from shuttle.workflow_log import (
    AppendRefused,
    EventDraft,
    LogClosed,
    LogFenced,
    LogUnavailable,
)

log = logging.getLogger(__name__)


def _draft_message(draft: EncodedDraft) -> common_pb2.EventDraft:
    """The draft on the wire, stamped with when it happened (a Timestamp set field by field:
    no datetime is made for it on the producer's side)."""
    message = common_pb2.EventDraft(
        type=type_value(draft.type),
        agent_id=draft.agent_id,
        message=draft.message,
        payload_json=draft.payload_json,
    )
    seconds = int(draft.at)
    message.timestamp.seconds = seconds
    message.timestamp.nanos = int((draft.at - seconds) * 1e9)
    return message


BACKOFF_FIRST_SECONDS = 0.05
BACKOFF_MAX_SECONDS = 1.0
APPEND_TIMEOUT_SECONDS = 10.0


class Producer:
    """One producer of one workflow's log: over the process's AppendStream when given one,
    else call by call through EventService.Append."""

    def __init__(
        self,
        stub: events_pb2_grpc.EventServiceAsyncStub,
        workflow_id: str,
        tenant_id: str,
        *,
        name: str,
        stream: AppendStream | None = None,
        retry_seconds: float = 30.0,
        timeout_seconds: float = APPEND_TIMEOUT_SECONDS,
        event_max_bytes: int = EVENT_MAX_BYTES,
        batch_max_bytes: int = BATCH_MAX_BYTES,
        lease_epoch: int = 0,
    ) -> None:
        self._stub = stub
        self._stream = stream
        self._workflow_id = workflow_id
        self._tenant_id = tenant_id
        self._metadata = tenant_metadata(tenant_id)
        self._retry_seconds = retry_seconds
        self._timeout_seconds = timeout_seconds
        self._event_max_bytes = event_max_bytes
        self._batch_max_bytes = batch_max_bytes
        self.lease_epoch = lease_epoch
        """The run's lease epoch every batch carries (0: not fenced)."""
        # The events service recognises a resent batch by (workflow, producer id, number).
        self.producer_id = f"{name}:{uuid.uuid4().hex}"
        self.batches = 0
        """Batch numbers used so far: the last batch went as number `batches`."""

    async def append(self, drafts: Sequence[EventDraft]) -> list[int]:
        """Append the drafts, from the first, that one Append takes (at least one, so a
        caller sends the rest next); their seqs.

        Raises LogUnavailable once the events service stayed out of reach for the retry
        window, LogClosed when the log already ended, LogFenced (never retried) when the
        run's lease moved past this producer's epoch, AppendRefused for a batch it refuses."""
        batch = first_batch(
            (encode(d, self._event_max_bytes) for d in drafts), self._batch_max_bytes
        )
        self.batches += 1
        request = events_pb2.AppendRequest(
            workflow_id=self._workflow_id,
            tenant_id=self._tenant_id,
            events=[_draft_message(e) for e in batch],
            producer_id=self.producer_id,
            batch_seq=self.batches,
            lease_epoch=self.lease_epoch,
        )
        try:
            # The first attempt outside the retry machinery: it is the one nearly every
            # batch needs, and appends are on every run's hot path.
            return await self._send(request)
        except LogUnavailable:
            if self._retry_seconds <= 0:
                raise
        retrying = AsyncRetrying(
            retry=retry_if_exception_type(LogUnavailable),
            wait=wait_exponential(multiplier=BACKOFF_FIRST_SECONDS, max=BACKOFF_MAX_SECONDS),
            stop=stop_before_delay(self._retry_seconds),
            before_sleep=lambda state: _resending(state, request.batch_seq),
            reraise=True,
        )
        async for attempt in retrying:
            with attempt:
                return await self._send(request)
        raise AssertionError("unreachable: the last attempt raises or returns")

    async def _send(self, request: events_pb2.AppendRequest) -> list[int]:
        if self._stream is not None:
            try:
                answer = await self._stream.append(request, self._timeout_seconds)
            except AppendStreamBroken as broken:
                raise LogUnavailable(str(broken)) from broken
            if answer.HasField("error"):
                raise append_failure(status_code(answer.error.code), answer.error.message)
            return list(answer.seqs)
        try:
            response = await self._stub.Append(
                request, timeout=self._timeout_seconds, metadata=self._metadata
            )
        except grpc.aio.AioRpcError as exc:
            raise append_failure(exc.code(), str(exc.details())) from exc
        return list(response.seqs)


def append_failure(code: grpc.StatusCode, details: str) -> Exception:
    """What a failed append means: resend, stop at a closed log or a run taken over, or give
    up on the batch."""
    if code in RETRYABLE_CODES:
        return LogUnavailable(f"{code.name}: {details}")
    if code == grpc.StatusCode.FAILED_PRECONDITION:
        return LogClosed(details)
    if code == grpc.StatusCode.ABORTED:
        return LogFenced(details)
    return AppendRefused(code.name, details)


def _resending(state: RetryCallState, batch_seq: int) -> None:
    error = state.outcome.exception() if state.outcome is not None else None
    log.warning(
        "events service unavailable, resending batch",
        extra={"batch_seq": batch_seq, "error": str(error)},
    )
