"""The workflow log over gRPC (EventService), as the approval flow's WorkflowLog."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING

from services.tools.approval_flow import LogEvent
from shuttle.envelope import type_name, type_value
from shuttle.utf8 import json_text
from shuttle.v1 import common_pb2, events_pb2

if TYPE_CHECKING:
    from shuttle.v1.events_pb2_grpc import EventServiceAsyncStub


class GrpcWorkflowLog:
    def __init__(self, stub: EventServiceAsyncStub) -> None:
        self._stub = stub

    async def append(
        self, workflow_id: str, tenant_id: str, events: Sequence[LogEvent]
    ) -> list[int]:
        response = await self._stub.Append(
            events_pb2.AppendRequest(
                workflow_id=workflow_id,
                tenant_id=tenant_id,
                events=[
                    common_pb2.EventDraft(
                        type=type_value(event.type),
                        agent_id=event.agent_id,
                        message=event.message,
                        payload_json=json_text(event.payload),
                    )
                    for event in events
                ],
            )
        )
        return list(response.seqs)

    async def decisions(
        self, workflow_id: str, tenant_id: str, from_seq: int
    ) -> AsyncIterator[str]:
        stream = self._stub.Stream(
            events_pb2.StreamRequest(
                workflow_id=workflow_id,
                tenant_id=tenant_id,
                from_seq=from_seq,
                types=[type_value("APPROVAL_DECISION")],
            )
        )
        try:
            async for event in stream:
                if type_name(event.type) != "APPROVAL_DECISION":
                    continue  # STREAM_END, always delivered
                payload = json.loads(event.payload_json or "{}")
                approval_id = payload.get("approval_id")
                if isinstance(approval_id, str):
                    yield approval_id
        finally:
            stream.cancel()
