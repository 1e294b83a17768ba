"""The executor's ports on the events service, through the shared events client.

The client itself is the command feed's source (`follow_commands`) and each run's producer
is its event sink; what is left here turns requests and answers into the ports' terms.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import grpc

from services.executor.ports import ClaimedRun, EventSink, LeaseRefused, RunRequest
from services.executor.recovery.records import Recorded
from shuttle.envelope import type_name
from shuttle.events_client import EventsClient
from shuttle.events_client.commands import log_command
from shuttle.v1 import common_pb2
from shuttle.workflow_log import EventDraft, LogCommand

CONTROL_TYPES = ("WORKFLOW_PAUSING", "WORKFLOW_PAUSED", "WORKFLOW_RESUMED", "WORKFLOW_CANCELLING")


def run_sink(
    client: EventsClient, workflow_id: str, tenant_id: str, *, lease_epoch: int = 0, **sizes: int
) -> EventSink:
    """A run's producer: its batches share the process's AppendStream with every other run
    and carry the run's `lease_epoch` (`sizes` may lower the event and batch limits, as
    `EventsClient.producer` takes them)."""
    return client.producer(
        workflow_id, tenant_id, name="run", shared_stream=True, lease_epoch=lease_epoch, **sizes
    )


class GrpcWorkflowRegistry:
    def __init__(self, client: EventsClient) -> None:
        self._client = client

    async def create(
        self, request: RunRequest, *, lease_owner: str = "", lease_seconds: float = 0.0
    ) -> str:
        return await self._client.create_workflow(
            request.tenant_id,
            query=request.query,
            owner=request.owner,
            session_id=request.session_id,
            spec_json=request.spec_json(),
            lease_owner=lease_owner,
            lease_ttl_seconds=lease_seconds,
            over_stream=True,
        )


class GrpcRunLeases:
    """Run leases through EventService.RenewLease, ReleaseLease and ClaimRuns."""

    def __init__(self, client: EventsClient) -> None:
        self._client = client

    async def renew(
        self, workflow_id: str, tenant_id: str, owner: str, ttl_seconds: float, epoch: int = 0
    ) -> None:
        try:
            await self._client.renew_lease(workflow_id, tenant_id, owner, ttl_seconds, epoch)
        except grpc.aio.AioRpcError as exc:
            # Taken over or ended (FAILED_PRECONDITION), or deleted (NOT_FOUND): not ours.
            if exc.code() in (grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.NOT_FOUND):
                raise LeaseRefused(str(exc.details())) from exc
            raise

    async def release(self, workflow_id: str, tenant_id: str, owner: str, epoch: int) -> None:
        await self._client.release_lease(workflow_id, tenant_id, owner, epoch)

    async def claim(self, owner: str, ttl_seconds: float, limit: int) -> list[ClaimedRun]:
        return [
            ClaimedRun(
                workflow_id=w.workflow_id,
                tenant_id=w.tenant_id,
                owner=w.owner,
                query=w.query,
                session_id=w.session_id,
                spec_json=w.spec_json,
                epoch=int(w.lease_epoch),
                takeovers=int(w.takeovers),
                last_append_at=w.updated_at.ToNanoseconds() / 1e9,
            )
            for w in await self._client.claim_runs(owner, ttl_seconds, limit)
        ]


class GrpcRunLog:
    """A run's log as a takeover reads it."""

    def __init__(self, client: EventsClient) -> None:
        self._client = client

    async def read(self, workflow_id: str, tenant_id: str) -> list[Recorded]:
        return await read_log(self._client, workflow_id, tenant_id)


class GrpcWorkflowLog:
    """What Control and Interrupt read and write (the command desk's WorkflowLog)."""

    def __init__(self, client: EventsClient) -> None:
        self._client = client

    async def status(self, workflow_id: str, tenant_id: str) -> str:
        workflow = await self._client.get_workflow(workflow_id, tenant_id)
        return common_pb2.WorkflowStatus.Name(workflow.status).removeprefix("WORKFLOW_STATUS_")

    async def control_events(self, workflow_id: str, tenant_id: str) -> Sequence[LogCommand]:
        found: list[LogCommand] = []
        from_seq = 1
        while from_seq:
            page = await self._client.list_events(
                workflow_id, tenant_id, from_seq=from_seq, types=CONTROL_TYPES
            )
            found += [log_command(e) for e in page.events]
            from_seq = int(page.next_seq)
        return found

    async def append(
        self, workflow_id: str, tenant_id: str, type_: str, message: str, payload: Mapping[str, Any]
    ) -> int:
        # A command is its own producer, appended once: the caller hears of an outage at once
        # and may send the command again.
        draft = EventDraft(type_, message, payload)
        (seq,) = await self._client.append_once(workflow_id, tenant_id, [draft], name="command")
        return seq


async def read_log(client: EventsClient, workflow_id: str, tenant_id: str) -> list[Recorded]:
    """A run's durable events, every page, tool results whole: what a takeover folds."""
    found: list[Recorded] = []
    from_seq = 1
    while from_seq:
        page = await client.list_events(
            workflow_id, tenant_id, from_seq=from_seq, full_results=True
        )
        found += [recorded(event) for event in page.events]
        from_seq = int(page.next_seq)
    return found


def recorded(event: common_pb2.Event) -> Recorded:
    return Recorded(
        seq=int(event.seq),
        type=type_name(event.type),
        agent_id=event.agent_id,
        payload=json.loads(event.payload_json or "{}"),
        timestamp=event.timestamp.ToNanoseconds() / 1e9,
    )
