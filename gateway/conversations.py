"""What a session means across services: its turns' outcomes, its history, its deletion.

Turns are completed from the events service's record of each workflow (its terminal
status, result and usage); deletion asks the events and tools services to forget the
session's workflows before the gateway drops its own rows, so a failure part-way leaves
the session listed and the delete can simply be repeated.
"""

from __future__ import annotations

import grpc

from gateway.backends import Backends, tenant_metadata
from gateway.errors import ApiError
from gateway.stores.sessions import RUNNING, Session, SessionStore, Turn
from gateway.workflow_status import status_name
from shuttle.usage import TokenUsage, usage_from_proto
from shuttle.v1 import tools_pb2

ENDED = {"completed", "failed", "cancelled"}


async def session_or_404(store: SessionStore, tenant_id: str, session_id: str) -> Session:
    session = await store.get(tenant_id, session_id)
    if session is None:
        raise ApiError(404, "not_found", f"session {session_id!r} not found")
    return session


async def settled_turns(
    store: SessionStore, backends: Backends, tenant_id: str, session_id: str
) -> list[Turn]:
    """The session's turns, with those whose run has ended since completed from its record."""
    turns = await store.turns(tenant_id, session_id)
    changed = False
    for turn in turns:
        if not turn.open or turn.workflow_id is None:
            continue
        try:
            wf = await backends.events.get_workflow(turn.workflow_id, tenant_id)
        except grpc.aio.AioRpcError as exc:
            if exc.code() != grpc.StatusCode.NOT_FOUND:
                raise
            # The log is gone (retention): the turn can no longer be completed.
            await store.complete_turn(turn.turn_id, "expired", "", TokenUsage())
            changed = True
            continue
        status = status_name(wf.status)
        if status in ENDED:
            usage = usage_from_proto(wf.usage)
            await store.complete_turn(turn.turn_id, status, wf.result or wf.error, usage)
            changed = True
    return await store.turns(tenant_id, session_id) if changed else turns


async def delete_session(
    store: SessionStore, backends: Backends, tenant_id: str, session_id: str
) -> list[str]:
    """Delete the session with its turns, events, tool data and task index rows; the
    workflow ids it held. A session with a run still going is refused (409)."""
    await session_or_404(store, tenant_id, session_id)
    turns = await settled_turns(store, backends, tenant_id, session_id)
    running = [t.workflow_id for t in turns if t.status == RUNNING]
    if running:
        raise ApiError(
            409,
            "session_busy",
            f"session {session_id!r} has a task still running ({running[0]}); "
            "cancel it or wait for it to end, then delete the session",
        )
    workflow_ids = [t.workflow_id for t in turns if t.workflow_id]
    metadata = tenant_metadata(tenant_id)
    for start in range(0, len(workflow_ids), DELETE_BATCH):
        batch = workflow_ids[start : start + DELETE_BATCH]
        await backends.tools.DeleteWorkflowData(
            tools_pb2.DeleteWorkflowDataRequest(tenant_id=tenant_id, workflow_ids=batch),
            metadata=metadata,
        )
        await backends.events.delete_workflows(tenant_id, batch)
    await store.delete(tenant_id, session_id, workflow_ids)
    return workflow_ids


DELETE_BATCH = 1000
"""Ids per DeleteWorkflows / DeleteWorkflowData call (the services' limit)."""
