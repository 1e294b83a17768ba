"""gRPC adapter: shuttle.v1.ToolService on top of ToolHost (protobuf ⇄ domain only)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from datetime import datetime

import grpc
from google.protobuf.timestamp_pb2 import Timestamp

from services.tools.approval_flow import ApprovalService
from services.tools.approvals import (
    OPERATOR_DECISIONS,
    Approval,
    ApprovalAlreadyDecidedError,
    ApprovalNotFoundError,
)
from services.tools.artifacts import ArtifactNotFound, ArtifactTooLarge
from services.tools.catalog import ToolSpec
from services.tools.cleanup import WorkflowDataCleaner
from services.tools.host import ToolHost
from services.tools.recorded import CallMismatch, LedgerUnavailable, RecordedCalls
from shuttle.grpc_auth import EXECUTOR, GATEWAY, method_roles
from shuttle.grpc_server import Context
from shuttle.tool_calls import DataProcessed, ToolCall, ToolOutcome, artifact_name_ok
from shuttle.v1 import tools_pb2, tools_pb2_grpc

MAX_DELETE_IDS = 1000
# The ledger's key columns (services/tools/db.py).
MAX_ID_CHARS = 128
SERVICE_NAME: str = tools_pb2.DESCRIPTOR.services_by_name["ToolService"].full_name
# Who may call each method: tools run only for the executor's runs.
CALLER_ROLES = method_roles(
    tools_pb2.DESCRIPTOR.services_by_name["ToolService"],
    {
        "Execute": {EXECUTOR},
        "DeleteWorkflowData": {GATEWAY},
        "ListTools": {GATEWAY, EXECUTOR},
        "ListApprovals": {GATEWAY, EXECUTOR},
        "DecideApproval": {GATEWAY, EXECUTOR},
        "GetArtifact": {GATEWAY},
    },
)


def spec_to_proto(spec: ToolSpec, timeout_seconds: float) -> tools_pb2.ToolSpec:
    """A catalog entry on the wire; `timeout_seconds` is the effective timeout."""
    return tools_pb2.ToolSpec(
        name=spec.name,
        description=spec.description,
        parameters_json=json.dumps(spec.parameters, ensure_ascii=False),
        category=spec.category,
        flags=tools_pb2.ToolFlags(
            read_only=spec.read_only,
            requires_approval=spec.requires_approval,
            cacheable=spec.cacheable,
            timeout_seconds=timeout_seconds,
        ),
    )


def request_from_proto(request: tools_pb2.ExecuteRequest) -> ToolCall:
    return ToolCall(
        tool_name=request.tool_name,
        arguments_json=request.arguments_json,
        call_id=request.call_id,
        workflow_id=request.workflow_id,
        tenant_id=request.tenant_id,
        agent_id=request.agent_id,
        read_only=request.read_only,
    )


def result_to_proto(result: ToolOutcome) -> tools_pb2.ExecuteResponse:
    return tools_pb2.ExecuteResponse(
        call_id=result.call_id,
        observation=result.observation,
        error=result.error,
        blocked=result.blocked,
        block_reason=result.block_reason,
        truncated=result.truncated,
        artifacts=[
            tools_pb2.Artifact(
                name=artifact.name,
                mime_type=artifact.mime_type,
                size_bytes=artifact.size_bytes,
                uri=artifact.uri,
            )
            for artifact in result.artifacts
        ],
        duration_ms=result.duration_ms,
        processed=_processed(result.processed),
    )


def _processed(processed: DataProcessed | None) -> tools_pb2.DataProcessed | None:
    if processed is None:
        return None
    return tools_pb2.DataProcessed(
        operation=processed.operation,
        bytes_processed=processed.bytes_processed,
        records_processed=processed.records_processed,
        total_records=processed.total_records,
        processing_stage=processed.processing_stage,
    )


def _timestamp(value: datetime | None) -> Timestamp | None:
    if value is None:
        return None
    stamp = Timestamp()
    stamp.FromDatetime(value)
    return stamp


def approval_to_proto(approval: Approval) -> tools_pb2.Approval:
    return tools_pb2.Approval(
        approval_id=approval.approval_id,
        workflow_id=approval.workflow_id,
        tool_name=approval.tool_name,
        arguments_json=approval.arguments_json,
        status=approval.status,
        decided_by=approval.decided_by,
        comment=approval.comment,
        requested_at=_timestamp(approval.requested_at),
        decided_at=_timestamp(approval.decided_at),
    )


class ToolServiceServicer(tools_pb2_grpc.ToolServiceServicer):
    """Thin grpc.aio servicer: tool failures travel in ExecuteResponse, not as RPC errors."""

    def __init__(
        self,
        host: ToolHost,
        approvals: ApprovalService | None = None,
        cleaner: WorkflowDataCleaner | None = None,
        recorded: RecordedCalls | None = None,
    ) -> None:
        self._host = host
        self._approvals = approvals
        self._cleaner = cleaner
        self._recorded = recorded

    async def _require_approvals(self, context: Context) -> ApprovalService:
        if self._approvals is None:
            await context.abort(
                grpc.StatusCode.FAILED_PRECONDITION,
                "approvals are not available: this tools service has no database configured",
            )
            raise AssertionError("context.abort() returned")
        return self._approvals

    async def ListTools(
        self, request: tools_pb2.ListToolsRequest, context: Context
    ) -> tools_pb2.ListToolsResponse:
        specs = self._host.list_tools(
            tenant_id=request.tenant_id,
            category=request.category,
            names=list(request.names),
            read_only_only=request.read_only_only,
        )
        return tools_pb2.ListToolsResponse(
            tools=[spec_to_proto(spec, self._host.timeout_for(spec)) for spec in specs]
        )

    async def Execute(
        self, request: tools_pb2.ExecuteRequest, context: Context
    ) -> tools_pb2.ExecuteResponse:
        if not request.tool_name.strip():
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT, "ExecuteRequest.tool_name is required"
            )
        ids = {
            "workflow_id": request.workflow_id,
            "call_id": request.call_id,
            "tenant_id": request.tenant_id,
        }
        for field, value in ids.items():
            if len(value) > MAX_ID_CHARS:
                await context.abort(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"ExecuteRequest.{field} is longer than {MAX_ID_CHARS} characters",
                )
        call = request_from_proto(request)
        if self._recorded is None:
            return result_to_proto(await self._host.execute(call))
        try:
            result = await self._recorded.execute(call)
        except CallMismatch as exc:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(exc))
        except LedgerUnavailable as exc:
            await context.abort(grpc.StatusCode.UNAVAILABLE, str(exc))
        return result_to_proto(result)

    async def DecideApproval(
        self, request: tools_pb2.DecideApprovalRequest, context: Context
    ) -> tools_pb2.Approval:
        approvals = await self._require_approvals(context)
        if not request.approval_id.strip():
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT, "DecideApprovalRequest.approval_id is required"
            )
        if request.decision not in OPERATOR_DECISIONS:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"DecideApprovalRequest.decision must be 'approved' or 'denied', "
                f"got {request.decision!r}",
            )
        try:
            decided = await approvals.decide(
                request.approval_id,
                request.tenant_id,
                request.decision,
                decided_by=request.decided_by,
                comment=request.comment,
            )
        except ApprovalNotFoundError as exc:
            await context.abort(grpc.StatusCode.NOT_FOUND, str(exc))
        except ApprovalAlreadyDecidedError as exc:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(exc))
        return approval_to_proto(decided)

    async def ListApprovals(
        self, request: tools_pb2.ListApprovalsRequest, context: Context
    ) -> tools_pb2.ListApprovalsResponse:
        approvals = await self._require_approvals(context)
        found = await approvals.store.list(
            request.tenant_id,
            workflow_id=request.workflow_id,
            pending_only=request.pending_only,
        )
        return tools_pb2.ListApprovalsResponse(approvals=[approval_to_proto(a) for a in found])

    async def DeleteWorkflowData(
        self, request: tools_pb2.DeleteWorkflowDataRequest, context: Context
    ) -> tools_pb2.DeleteWorkflowDataResponse:
        if not request.tenant_id.strip():
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT, "DeleteWorkflowDataRequest.tenant_id is required"
            )
        if len(request.workflow_ids) > MAX_DELETE_IDS:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"DeleteWorkflowDataRequest.workflow_ids holds {len(request.workflow_ids)} ids; "
                f"at most {MAX_DELETE_IDS} per call",
            )
        if self._cleaner is None:
            return tools_pb2.DeleteWorkflowDataResponse()
        done = await self._cleaner.forget(request.tenant_id, list(request.workflow_ids))
        return tools_pb2.DeleteWorkflowDataResponse(
            workspaces_deleted=done.workspaces, records_deleted=done.records
        )

    async def GetArtifact(
        self, request: tools_pb2.GetArtifactRequest, context: Context
    ) -> AsyncIterator[tools_pb2.ArtifactChunk]:
        store = self._host.artifacts
        if not request.tenant_id.strip() or not request.workflow_id.strip():
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                "GetArtifactRequest.tenant_id and workflow_id are required",
            )
        if not artifact_name_ok(request.name):
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"GetArtifactRequest.name {request.name[:80]!r} is no artifact's name: "
                "letters, digits, '_', '-' and '.', as TOOL_OBSERVATION names it",
            )
        if store is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, "this tools service keeps no artifacts")
        assert store is not None
        try:
            artifact, chunks = store.read(
                request.tenant_id, request.workflow_id, request.name, request.max_bytes
            )
        except ArtifactNotFound:
            await context.abort(
                grpc.StatusCode.NOT_FOUND,
                f"workflow {request.workflow_id} has no artifact {request.name!r}",
            )
        except ArtifactTooLarge as exc:
            await context.abort(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"artifact {request.name!r} is {exc.size} bytes, over the {request.max_bytes} "
                "asked for at most",
            )
        first: tools_pb2.ArtifactChunk | None = tools_pb2.ArtifactChunk(
            artifact=tools_pb2.Artifact(
                name=artifact.name,
                mime_type=artifact.mime_type,
                size_bytes=artifact.size_bytes,
                uri=artifact.uri,
            )
        )
        # Read off the event loop: an artifact may be megabytes on a slow volume.
        while (data := await asyncio.to_thread(next, chunks, None)) is not None:
            if first is not None:
                first.data = data
                yield first
                first = None
            else:
                yield tools_pb2.ArtifactChunk(data=data)
        if first is not None:
            yield first  # an empty artifact: its description alone
