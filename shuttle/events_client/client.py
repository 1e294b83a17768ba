"""The events service as every Shuttle component calls it: the one place that makes an
EventService stub.

Every call carries the caller's tenant in the metadata and a deadline; appends go through a
`Producer` (producer id, batch numbers, resends), a log is followed across restarts, and the
executor's command feed is one FollowCommands session. Reads raise gRPC's own errors, which
each caller turns into its own (an HTTP status, a gRPC status passed on).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Collection, Sequence

import grpc

from shuttle.envelope import type_value
from shuttle.events_client.append_stream import AppendStream, AppendStreamBroken
from shuttle.events_client.commands import follow_commands
from shuttle.events_client.follow import Upstream, follow
from shuttle.events_client.producer import APPEND_TIMEOUT_SECONDS, Producer
from shuttle.grpc_client import status_code, tenant_metadata
from shuttle.v1 import events_pb2, events_pb2_grpc
from shuttle.workflow_log import EventDraft, FeedItem, WatchRequest

CALL_TIMEOUT_SECONDS = 30.0
"""Any unary call but an append: the events service answers them from an index or one row."""
PAGE_MAX = 1000


class EventsClient:
    """EventService over `channel`. Calls that belong to the process rather than to one
    request (the shared AppendStream, the command feed) go over `streams_channel` when given:
    an untraced channel holds no span and no interceptor for the life of the process."""

    def __init__(
        self,
        channel: grpc.aio.Channel,
        *,
        streams_channel: grpc.aio.Channel | None = None,
        retry_seconds: float = 30.0,
    ) -> None:
        self._stub = events_pb2_grpc.EventServiceStub(channel)
        self._streams = (
            events_pb2_grpc.EventServiceStub(streams_channel)
            if streams_channel is not None
            else self._stub
        )
        self._append_stream: AppendStream | None = None
        self.retry_seconds = retry_seconds
        """How long appends are resent, and a followed log opened again, through an outage."""

    # -- writing ---------------------------------------------------------------------------

    async def create_workflow(
        self,
        tenant_id: str,
        *,
        query: str,
        owner: str = "",
        session_id: str = "",
        workflow_id: str = "",
        spec_json: str = "",
        lease_owner: str = "",
        lease_ttl_seconds: float = 0.0,
        over_stream: bool = False,
    ) -> str:
        """A new workflow's id (`workflow_id` when given). With `lease_owner` it is created
        leased to it at epoch 1 for `lease_ttl_seconds`; `spec_json` (the run's request)
        comes back to whoever takes the run over. With `over_stream` the request goes over
        the process's AppendStream call, as a process creating many workflows wants.
        A refusal raises grpc.aio.AioRpcError either way, with the events service's status."""
        if lease_owner and lease_ttl_seconds <= 0:
            raise ValueError(f"lease_ttl_seconds must be positive (got {lease_ttl_seconds})")
        request = events_pb2.CreateWorkflowRequest(
            tenant_id=tenant_id,
            owner=owner,
            query=query,
            session_id=session_id,
            workflow_id=workflow_id,
            spec_json=spec_json,
            lease_owner=lease_owner,
            lease_ttl_ms=_milliseconds(lease_ttl_seconds) if lease_owner else 0,
        )
        if over_stream:
            return await self._create_over_stream(request)
        workflow = await self._stub.CreateWorkflow(
            request, timeout=CALL_TIMEOUT_SECONDS, metadata=tenant_metadata(tenant_id)
        )
        return str(workflow.workflow_id)

    async def _create_over_stream(self, request: events_pb2.CreateWorkflowRequest) -> str:
        try:
            answer = await self._shared_stream().create(request, CALL_TIMEOUT_SECONDS)
        except AppendStreamBroken as broken:
            # Not resent: the workflow may have been made, and a resend would make another.
            raise _status_error(grpc.StatusCode.UNAVAILABLE, str(broken)) from None
        if answer.HasField("error"):
            raise _status_error(status_code(answer.error.code), answer.error.message)
        return str(answer.workflow.workflow_id)

    def producer(
        self,
        workflow_id: str,
        tenant_id: str,
        *,
        name: str,
        shared_stream: bool = False,
        retry_seconds: float | None = None,
        timeout_seconds: float = APPEND_TIMEOUT_SECONDS,
        lease_epoch: int = 0,
        **sizes: int,
    ) -> Producer:
        """A producer of `workflow_id`'s log named `name` (its id adds a random part). With
        `shared_stream` its batches go over the process's one AppendStream call, as a
        process appending for many runs wants; `sizes` may lower the event and batch
        limits (`event_max_bytes`, `batch_max_bytes`). With a `lease_epoch` every batch is
        fenced on it: once the run is taken over, appends raise LogFenced."""
        return Producer(
            self._stub,
            workflow_id,
            tenant_id,
            name=name,
            stream=self._shared_stream() if shared_stream else None,
            retry_seconds=self.retry_seconds if retry_seconds is None else retry_seconds,
            timeout_seconds=timeout_seconds,
            lease_epoch=lease_epoch,
            **sizes,
        )

    async def append_once(
        self,
        workflow_id: str,
        tenant_id: str,
        drafts: Sequence[EventDraft],
        *,
        name: str,
    ) -> list[int]:
        """Append `drafts` in order as a producer of their own (a command, an approval, a
        report), in one attempt: the caller decides what an outage means. Their seqs."""
        producer = self.producer(workflow_id, tenant_id, name=name, retry_seconds=0)
        seqs: list[int] = []
        while len(seqs) < len(drafts):  # more than one Append takes goes on in the next
            seqs += await producer.append(drafts[len(seqs) :])
        return seqs

    async def renew_lease(
        self, workflow_id: str, tenant_id: str, owner: str, ttl_seconds: float, epoch: int = 0
    ) -> events_pb2.Workflow:
        """Extend the run's lease; with an `epoch`, only while `owner` holds it at that
        epoch (else FAILED_PRECONDITION: the run was taken over or has ended)."""
        return await self._stub.RenewLease(
            events_pb2.RenewLeaseRequest(
                workflow_id=workflow_id,
                tenant_id=tenant_id,
                owner=owner,
                ttl_ms=_milliseconds(ttl_seconds),
                epoch=epoch,
            ),
            timeout=CALL_TIMEOUT_SECONDS,
            metadata=tenant_metadata(tenant_id),
        )

    async def claim_runs(
        self, owner: str, ttl_seconds: float, limit: int
    ) -> list[events_pb2.Workflow]:
        """Take over up to `limit` runs whose lease lapsed or was released, each now
        `owner`'s at its next epoch (`lease_epoch`), with its `spec_json` and `takeovers`.
        Never resent: a claim whose answer was lost lapses and is claimed again."""
        answer = await self._stub.ClaimRuns(
            events_pb2.ClaimRunsRequest(
                owner=owner, ttl_ms=_milliseconds(ttl_seconds), limit=limit
            ),
            timeout=CALL_TIMEOUT_SECONDS,
        )
        return list(answer.workflows)

    async def release_lease(
        self, workflow_id: str, tenant_id: str, owner: str, epoch: int
    ) -> events_pb2.Workflow:
        """Hand the run over at once: another executor may claim it at its next poll."""
        return await self._stub.ReleaseLease(
            events_pb2.ReleaseLeaseRequest(
                workflow_id=workflow_id, tenant_id=tenant_id, owner=owner, epoch=epoch
            ),
            timeout=CALL_TIMEOUT_SECONDS,
            metadata=tenant_metadata(tenant_id),
        )

    async def delete_workflows(
        self, tenant_id: str, workflow_ids: Sequence[str]
    ) -> events_pb2.DeleteWorkflowsResponse:
        return await self._stub.DeleteWorkflows(
            events_pb2.DeleteWorkflowsRequest(tenant_id=tenant_id, workflow_ids=workflow_ids),
            timeout=CALL_TIMEOUT_SECONDS,
            metadata=tenant_metadata(tenant_id),
        )

    # -- reading ---------------------------------------------------------------------------

    async def get_workflow(self, workflow_id: str, tenant_id: str) -> events_pb2.Workflow:
        return await self._stub.GetWorkflow(
            events_pb2.GetWorkflowRequest(workflow_id=workflow_id, tenant_id=tenant_id),
            timeout=CALL_TIMEOUT_SECONDS,
            metadata=tenant_metadata(tenant_id),
        )

    async def list_events(
        self,
        workflow_id: str,
        tenant_id: str,
        *,
        from_seq: int = 1,
        limit: int = PAGE_MAX,
        types: Collection[str] = (),
        full_results: bool = False,
    ) -> events_pb2.ListResponse:
        """One page of the log's history from `from_seq`: at most `limit` events, fewer when
        their bytes reach the service's page bound; `next_seq` is where the next page
        starts, 0 at the log's end."""
        return await self._stub.List(
            events_pb2.ListRequest(
                workflow_id=workflow_id,
                tenant_id=tenant_id,
                from_seq=from_seq,
                limit=limit,
                types=[type_value(name) for name in types],
                full_results=full_results,
            ),
            timeout=CALL_TIMEOUT_SECONDS,
            metadata=tenant_metadata(tenant_id),
        )

    def follow(
        self,
        workflow_id: str,
        tenant_id: str,
        from_seq: int = 1,
        *,
        types: Collection[str] = (),
        retry_seconds: float | None = None,
    ) -> Upstream:
        """The log from `from_seq` on, live, in batches, to its STREAM_END (see follow.py)."""
        window = self.retry_seconds if retry_seconds is None else retry_seconds
        return follow(self._stub, tenant_id, workflow_id, from_seq, window, types)

    def follow_commands(self, requests: AsyncIterator[WatchRequest]) -> AsyncIterator[FeedItem]:
        """One FollowCommands session over the process's streams channel (see commands.py)."""
        return follow_commands(self._streams, requests)

    def _shared_stream(self) -> AppendStream:
        if self._append_stream is None:
            self._append_stream = AppendStream(self._streams)
        return self._append_stream

    async def close(self) -> None:
        """End the shared AppendStream call; the channels are their opener's to close."""
        if self._append_stream is not None:
            await self._append_stream.close()
            self._append_stream = None


def _status_error(code: grpc.StatusCode, details: str) -> grpc.aio.AioRpcError:
    """A refusal that came as a message, raised as the unary call would have raised it."""
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details)


def _milliseconds(seconds: float) -> int:
    """A lease's time to live as the events service takes it (at least 1 ms)."""
    return max(1, round(seconds * 1000))
