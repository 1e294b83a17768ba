"""Helpers for approval tests: the workflow log read through EventService."""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING, Any

from shuttle.envelope import type_name
from shuttle.v1 import events_pb2

if TYPE_CHECKING:
    from shuttle.v1.events_pb2_grpc import EventServiceAsyncStub

HOOKS_GATING_CALCULATOR = """
hooks:
  - kind: approval
    tools: ["calculator"]
    risk_level: MEDIUM
"""


async def create_workflow(events: EventServiceAsyncStub, tenant: str) -> str:
    workflow = await events.CreateWorkflow(events_pb2.CreateWorkflowRequest(tenant_id=tenant))
    return str(workflow.workflow_id)


async def wait_for_event(
    events: EventServiceAsyncStub, workflow_id: str, tenant: str, wanted: str
) -> dict[str, Any]:
    """The first event of type `wanted` on the log (waiting for it, live)."""
    stream = events.Stream(events_pb2.StreamRequest(workflow_id=workflow_id, tenant_id=tenant))
    try:
        async with asyncio.timeout(30):
            async for event in stream:
                if type_name(event.type) == wanted:
                    return {
                        "seq": event.seq,
                        "message": event.message,
                        "payload": json.loads(event.payload_json or "{}"),
                    }
    finally:
        stream.cancel()
    raise AssertionError(f"the stream ended without {wanted}")


async def log_types(events: EventServiceAsyncStub, workflow_id: str, tenant: str) -> list[str]:
    page = await events.List(
        events_pb2.ListRequest(workflow_id=workflow_id, tenant_id=tenant, limit=1000)
    )
    return [type_name(event.type) for event in page.events]
