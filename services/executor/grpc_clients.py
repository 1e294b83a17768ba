"""Adapters from the executor's ports to the events and tools services over gRPC."""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Sequence
from functools import lru_cache

import grpc

from services.executor.append_stream import (
    AppendStream,
    AppendStreamBroken,
    AppendStreamUnsupported,
)
from services.executor.event_size import BATCH_MAX_BYTES, EVENT_MAX_BYTES, encode, first_batch
from services.executor.ports import (
    Artifact,
    EventDraft,
    LeaseRefused,
    LogClosed,
    SinkUnavailable,
    ToolDefinition,
    ToolInvocation,
    ToolOutcome,
)
from services.executor.runs import RunRequest
from shuttle.envelope import type_value
from shuttle.grpc_client import status_code, tenant_metadata
from shuttle.v1 import common_pb2, events_pb2, events_pb2_grpc, tools_pb2, tools_pb2_grpc

log = logging.getLogger(__name__)

# A restarting events service answers UNAVAILABLE (or not at all): the batch is resent.
RETRYABLE_CODES = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED})
APPEND_TIMEOUT_SECONDS = 10.0
# Distinct tool definitions kept decoded; a catalog rarely holds more than a few dozen.
TOOL_DEFINITIONS_KEPT = 1024


@lru_cache(maxsize=TOOL_DEFINITIONS_KEPT)
def _tool_definition(name: str, description: str, parameters_json: str) -> ToolDefinition:
    """Decoded once per distinct definition and shared: every run lists the catalog, and a
    decoded copy per run was much of what an in-flight run held."""
    return ToolDefinition(name, description, json.loads(parameters_json or "{}"))


class GrpcWorkflowRegistry:
    def __init__(self, stub: events_pb2_grpc.EventServiceAsyncStub) -> None:
        self._stub = stub

    async def create(self, request: RunRequest) -> str:
        workflow = await self._stub.CreateWorkflow(
            events_pb2.CreateWorkflowRequest(
                tenant_id=request.tenant_id,
                owner=request.owner,
                query=request.query,
                session_id=request.session_id,
            ),
            metadata=tenant_metadata(request.tenant_id),
        )
        return str(workflow.workflow_id)


class GrpcEventSink:
    """Appends to one workflow's log as one producer: over the process's AppendStream when
    given one (and the events service has it), else through EventService.Append."""

    def __init__(
        self,
        stub: events_pb2_grpc.EventServiceAsyncStub,
        workflow_id: str,
        tenant_id: str,
        stream: AppendStream | None = None,
        *,
        event_max_bytes: int = EVENT_MAX_BYTES,
        batch_max_bytes: int = BATCH_MAX_BYTES,
    ) -> None:
        self._stub = stub
        self._stream = stream
        self._event_max_bytes = event_max_bytes
        self._batch_max_bytes = batch_max_bytes
        self._workflow_id = workflow_id
        self._tenant_id = tenant_id
        # One producer per run: the events service recognises a resent batch by this id
        # and the batch number.
        self._producer_id = f"{workflow_id}:{uuid.uuid4().hex}"

    async def append(self, drafts: Sequence[EventDraft], batch_seq: int) -> Sequence[int]:
        batch = first_batch(
            (encode(d, self._event_max_bytes) for d in drafts), self._batch_max_bytes
        )
        request = events_pb2.AppendRequest(
            workflow_id=self._workflow_id,
            tenant_id=self._tenant_id,
            events=[
                common_pb2.EventDraft(
                    type=type_value(e.type),
                    agent_id=e.agent_id,
                    message=e.message,
                    payload_json=e.payload_json,
                )
                for e in batch
            ],
            producer_id=self._producer_id,
            batch_seq=batch_seq,
        )
        if self._stream is not None:
            try:
                answer = await self._stream.append(request, APPEND_TIMEOUT_SECONDS)
            except AppendStreamBroken as broken:
                raise SinkUnavailable(str(broken)) from broken
            except AppendStreamUnsupported:
                pass  # never sent: the events service predates AppendStream
            else:
                if answer.HasField("error"):
                    code = status_code(answer.error.code)
                    raise _append_failure(code, answer.error.message)
                return list(answer.seqs)
        try:
            response = await self._stub.Append(
                request, timeout=APPEND_TIMEOUT_SECONDS, metadata=tenant_metadata(self._tenant_id)
            )
        except grpc.aio.AioRpcError as exc:
            failure = _append_failure(exc.code(), str(exc.details()))
            if self._stream is not None and isinstance(failure, SinkUnavailable):
                self._stream.reconsider()  # a restarted events service may be a newer one
            raise failure from exc
        return list(response.seqs)


class AppendRefused(Exception):
    """The events service refused a batch for good (a fault in the batch or the request)."""


def _append_failure(code: grpc.StatusCode, details: str) -> Exception:
    """What the emitter makes of a failed append: resend, stop at a closed log, or fail."""
    if code in RETRYABLE_CODES:
        return SinkUnavailable(f"{code.name}: {details}")
    if code == grpc.StatusCode.FAILED_PRECONDITION:
        return LogClosed(details)
    return AppendRefused(f"{code.name}: {details}")


class GrpcRunLeases:
    """Run leases through EventService.RenewLease."""

    def __init__(self, stub: events_pb2_grpc.EventServiceAsyncStub) -> None:
        self._stub = stub

    async def renew(self, workflow_id: str, tenant_id: str, owner: str, ttl_seconds: float) -> None:
        request = events_pb2.RenewLeaseRequest(
            workflow_id=workflow_id,
            tenant_id=tenant_id,
            owner=owner,
            ttl_ms=max(1, round(ttl_seconds * 1000)),
        )
        try:
            await self._stub.RenewLease(request, metadata=tenant_metadata(tenant_id))
        except grpc.aio.AioRpcError as exc:
            # Taken over or ended (FAILED_PRECONDITION), or deleted (NOT_FOUND): not ours.
            if exc.code() in (grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.NOT_FOUND):
                raise LeaseRefused(str(exc.details())) from exc
            raise


class GrpcToolHost:
    """The tool service as the engine's ToolHost; RPC failures become error outcomes."""

    def __init__(
        self,
        stub: tools_pb2_grpc.ToolServiceAsyncStub,
        timeout_seconds: float,
        approval_timeout_seconds: float = 1800.0,
    ) -> None:
        self._stub = stub
        # Headroom over the tool's own limit so the tool service reports its timeout first.
        self._deadline = timeout_seconds + 5.0
        self._approval_wait = approval_timeout_seconds
        # Per tenant and tool, from ListTools: the tool's own timeout, and whether a human
        # must approve first (approval gates may apply to some tenants only).
        self._deadlines: dict[tuple[str, str], float] = {}

    async def list_tools(self, tenant_id: str) -> Sequence[ToolDefinition]:
        response = await self._stub.ListTools(tools_pb2.ListToolsRequest(tenant_id=tenant_id))
        for t in response.tools:
            deadline = (t.flags.timeout_seconds or self._deadline - 5.0) + 5.0
            if t.flags.requires_approval:
                deadline += self._approval_wait
            self._deadlines[(tenant_id, t.name)] = deadline
        return [_tool_definition(t.name, t.description, t.parameters_json) for t in response.tools]

    async def execute(self, call: ToolInvocation) -> ToolOutcome:
        request = tools_pb2.ExecuteRequest(
            workflow_id=call.workflow_id,
            tenant_id=call.tenant_id,
            call_id=call.call_id,
            tool_name=call.name,
            arguments_json=call.arguments_json,
            agent_id=call.agent_id,
        )
        try:
            response = await self._stub.Execute(
                request, timeout=self._deadlines.get((call.tenant_id, call.name), self._deadline)
            )
        except grpc.aio.AioRpcError as exc:
            message = f"tool {call.name} could not run: {exc.code().name}: {exc.details()}"
            return ToolOutcome(observation=message, error=message)
        return ToolOutcome(
            observation=response.observation,
            error=response.error,
            blocked=response.blocked,
            block_reason=response.block_reason,
            truncated=response.truncated,
            duration_ms=response.duration_ms,
            artifacts=tuple(
                Artifact(a.name, a.mime_type, a.size_bytes, a.uri) for a in response.artifacts
            ),
        )
