"""The workflow log as the approval flow's WorkflowLog, through the shared events client."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence

from shuttle.envelope import type_name
from shuttle.events_client import EventsClient
from shuttle.workflow_log import EventDraft


class GrpcWorkflowLog:
    def __init__(self, events: EventsClient) -> None:
        self._events = events

    async def append(
        self, workflow_id: str, tenant_id: str, events: Sequence[EventDraft]
    ) -> list[int]:
        return await self._events.append_once(workflow_id, tenant_id, events, name="approvals")

    async def decisions(
        self, workflow_id: str, tenant_id: str, from_seq: int
    ) -> AsyncIterator[str | None]:
        batches = self._events.follow(
            workflow_id, tenant_id, from_seq, types=("APPROVAL_DECISION",)
        )
        try:
            async for batch in batches:
                for event in batch:
                    name = type_name(event.type)
                    if name == "STREAM_END":  # always delivered, whatever the filter
                        yield None
                        return
                    if name != "APPROVAL_DECISION":
                        continue
                    payload = json.loads(event.payload_json or "{}")
                    approval_id = payload.get("approval_id")
                    if isinstance(approval_id, str):
                        yield approval_id
        finally:
            await batches.aclose()
