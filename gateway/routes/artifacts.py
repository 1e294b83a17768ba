"""`GET /api/v1/tasks/{id}/artifacts/{name}`: an artifact a tool made in one of the caller's
tasks, streamed from the tools service that keeps it.

Artifacts are model-written content (HTML, markdown): each is served with a sandboxing
Content-Security-Policy (no scripts, no requests out, an opaque origin) and `nosniff`, so
opening one in the browser cannot act as the console or as the user.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc
from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse

from gateway.backends import tenant_metadata
from gateway.edge.tenancy import CallerDep
from gateway.errors import ApiError, from_rpc_error
from gateway.routes.common import ERRORS, Clients, require_workflow
from shuttle.tool_calls import artifact_name_ok
from shuttle.v1 import tools_pb2

router = APIRouter(prefix="/api/v1", tags=["tasks"])

SANDBOX_CSP = "sandbox; default-src 'none'; img-src data:; style-src 'unsafe-inline'"


@router.get("/tasks/{workflow_id}/artifacts/{name}", responses=ERRORS)
async def get_artifact(
    workflow_id: str, name: str, caller: CallerDep, clients: Clients, request: Request
) -> StreamingResponse:
    """The artifact's content, with its MIME type, sandboxed."""
    if not artifact_name_ok(name):
        raise ApiError(
            400,
            "invalid_argument",
            f"{name[:80]!r} is no artifact's name: letters, digits, '_', '-' and '.', as the "
            "tool observation's artifacts name it",
        )
    tenant = caller.tenant_id
    await require_workflow(clients, tenant, workflow_id)
    limit: int = request.app.state.settings.artifact_max_bytes
    call = clients.tools.GetArtifact(
        tools_pb2.GetArtifactRequest(
            workflow_id=workflow_id, tenant_id=tenant, name=name, max_bytes=limit
        ),
        metadata=tenant_metadata(tenant),
    )
    try:
        first = await call.read()
    except grpc.aio.AioRpcError as exc:
        if exc.code() == grpc.StatusCode.FAILED_PRECONDITION:
            raise ApiError(
                422,
                "artifact_too_large",
                f"{exc.details()}; the gateway serves at most {limit} bytes "
                f"(SHUTTLE_ARTIFACT_MAX_BYTES)",
            ) from None
        raise from_rpc_error(exc) from None
    if not isinstance(first, tools_pb2.ArtifactChunk):  # the stream ended at once (EOF)
        raise ApiError(502, "upstream_error", "the tools service sent no artifact")
    artifact = first.artifact
    mime = artifact.mime_type or "application/octet-stream"
    if mime.startswith("text/"):
        mime += "; charset=utf-8"

    opening = first.data

    async def body() -> AsyncIterator[bytes]:
        yield opening
        async for chunk in call:
            yield chunk.data

    headers = {
        "Content-Length": str(artifact.size_bytes),
        "Content-Security-Policy": SANDBOX_CSP,
        "X-Content-Type-Options": "nosniff",
        "Content-Disposition": f'inline; filename="{artifact.name}"',
        "Cache-Control": "private, no-store",
    }
    return StreamingResponse(body(), media_type=mime, headers=headers)
