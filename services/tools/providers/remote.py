"""Tools served by a ToolProvider gRPC server (any language); hooks apply as to built-ins."""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any

import grpc

from services.tools.catalog import ToolError, ToolOutput, ToolSpec
from shuttle.grpc_client import open_channel
from shuttle.tool_calls import Artifact
from shuttle.utf8 import json_text
from shuttle.v1 import tool_provider_pb2, tool_provider_pb2_grpc, tools_pb2

if TYPE_CHECKING:
    from shuttle.v1.tool_provider_pb2_grpc import ToolProviderAsyncStub

log = logging.getLogger(__name__)

LIST_TIMEOUT_SECONDS = 10.0
# Headroom over the tool's timeout so the host's own deadline is the one that fires.
CALL_HEADROOM_SECONDS = 5.0


def spec_from_proto(spec: tools_pb2.ToolSpec, provider: str) -> ToolSpec:
    try:
        parameters = json.loads(spec.parameters_json or '{"type": "object"}')
    except json.JSONDecodeError as exc:
        raise ValueError(f"tool {spec.name!r}: parameters_json is not JSON: {exc}") from None
    timeout = spec.flags.timeout_seconds
    return ToolSpec(
        name=spec.name,
        description=spec.description,
        parameters=parameters,
        category=spec.category or provider,
        read_only=spec.flags.read_only,
        requires_approval=spec.flags.requires_approval,
        cacheable=spec.flags.cacheable,
        timeout_seconds=timeout if timeout > 0 else None,
    )


class RemoteTool:
    def __init__(
        self, spec: ToolSpec, stub: ToolProviderAsyncStub, provider: str, timeout: float
    ) -> None:
        self._spec = spec
        self._stub = stub
        self._provider = provider
        self._timeout = timeout

    @property
    def spec(self) -> ToolSpec:
        return self._spec

    async def run(self, args: dict[str, Any]) -> ToolOutput:
        from services.tools.context import current_call

        call = current_call()
        try:
            response = await self._stub.Execute(
                tool_provider_pb2.ProviderExecuteRequest(
                    tool_name=self._spec.name,
                    arguments_json=json_text(args),
                    call_id=call.call_id,
                    workflow_id=call.workflow_id,
                    tenant_id=call.tenant_id,
                    idempotency_key=call.idempotency_key,
                ),
                timeout=(self._spec.timeout_seconds or self._timeout) + CALL_HEADROOM_SECONDS,
            )
        except grpc.aio.AioRpcError as exc:
            raise ToolError(
                f"{self._spec.name}: the tool provider {self._provider!r} failed: "
                f"{exc.code().name}: {exc.details()}"
            ) from None
        if response is None:  # grpc.aio hands back None for a reply it could not parse
            raise ToolError(
                f"{self._spec.name}: the tool provider {self._provider!r} sent a reply that is "
                "not a valid ProviderExecuteResponse (string fields must be UTF-8)"
            )
        if response.error:
            raise ToolError(response.error)
        return ToolOutput(
            text=response.output,
            content_type=response.content_type or "text/plain",
            artifacts=tuple(
                Artifact(a.name, a.mime_type, a.size_bytes, a.uri) for a in response.artifacts
            ),
        )


class GrpcProvider:
    """One configured ToolProvider: a channel, and the tools it lists."""

    def __init__(self, name: str, target: str, default_timeout: float) -> None:
        self.name = name
        self.target = target
        self._channel = open_channel(target)
        self._stub: ToolProviderAsyncStub = tool_provider_pb2_grpc.ToolProviderStub(self._channel)
        self._timeout = default_timeout

    async def list_tools(self) -> list[RemoteTool]:
        response = await self._stub.ListTools(
            tool_provider_pb2.ProviderListToolsRequest(), timeout=LIST_TIMEOUT_SECONDS
        )
        tools = []
        for proto in response.tools:
            try:
                spec = spec_from_proto(proto, self.name)
            except ValueError as exc:
                log.error(
                    "skipping a provider tool", extra={"provider": self.name, "error": str(exc)}
                )
                continue
            tools.append(RemoteTool(spec, self._stub, self.name, self._timeout))
        return tools

    async def close(self) -> None:
        await self._channel.close()
