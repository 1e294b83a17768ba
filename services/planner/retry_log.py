"""The planner's model retries, shown on the log of the workflow they were made for."""

from __future__ import annotations

import logging
from typing import Protocol

import grpc

from shuttle.envelope import type_value
from shuttle.grpc_client import tenant_metadata
from shuttle.llm.protocol import RecoveryNotice, RetryNotice
from shuttle.llm.retry_events import LogEntry, recovery_entry, retry_entry
from shuttle.utf8 import json_text
from shuttle.v1 import common_pb2, events_pb2, events_pb2_grpc

log = logging.getLogger(__name__)

AGENT_ID = "planner"


class WorkflowLog(Protocol):
    async def append(self, workflow_id: str, tenant_id: str, entry: LogEntry) -> None: ...


class GrpcWorkflowLog:
    """Appends through EventService; a log that cannot be written is only logged here, since
    the planner's answer matters more than the report of its retries."""

    def __init__(self, stub: events_pb2_grpc.EventServiceAsyncStub) -> None:
        self._stub = stub

    async def append(self, workflow_id: str, tenant_id: str, entry: LogEntry) -> None:
        type_, message, payload = entry
        request = events_pb2.AppendRequest(
            workflow_id=workflow_id,
            tenant_id=tenant_id,
            events=[
                common_pb2.EventDraft(
                    type=type_value(type_),
                    agent_id=AGENT_ID,
                    message=message,
                    payload_json=json_text(payload),
                )
            ],
        )
        try:
            await self._stub.Append(request, timeout=10, metadata=tenant_metadata(tenant_id))
        except grpc.aio.AioRpcError as exc:
            log.warning(
                "could not report a retry on the workflow's log: %s",
                exc.details(),
                extra={"workflow_id": workflow_id},
            )


class WorkflowRetryObserver:
    """The RetryObserver of one planner call made for one workflow."""

    def __init__(self, log: WorkflowLog, workflow_id: str, tenant_id: str) -> None:
        self._log = log
        self._workflow_id = workflow_id
        self._tenant_id = tenant_id

    async def on_retry(self, notice: RetryNotice) -> None:
        await self._log.append(self._workflow_id, self._tenant_id, retry_entry(notice))

    async def on_recovery(self, notice: RecoveryNotice) -> None:
        await self._log.append(self._workflow_id, self._tenant_id, recovery_entry(notice))
