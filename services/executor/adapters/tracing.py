"""Spans and metrics around the engine's tool port, so the engine itself stays free of them."""

from __future__ import annotations

from collections.abc import Sequence

from opentelemetry.trace import Status, StatusCode

from services.executor.ports import ToolDefinition, ToolPort
from shuttle.metrics import TOOL_CALLS, TOOL_SECONDS
from shuttle.telemetry import tracer
from shuttle.tool_calls import ToolCall, ToolOutcome


class TracedTools:
    """A tool port whose every call is an `execute_tool` span and a metric sample."""

    def __init__(self, inner: ToolPort) -> None:
        self._inner = inner

    async def list_tools(self, tenant_id: str) -> Sequence[ToolDefinition]:
        return await self._inner.list_tools(tenant_id)

    async def execute(self, call: ToolCall) -> ToolOutcome:
        with tracer.start_as_current_span(f"execute_tool {call.tool_name}") as span:
            span.set_attribute("gen_ai.operation.name", "execute_tool")
            span.set_attribute("gen_ai.tool.name", call.tool_name)
            span.set_attribute("gen_ai.tool.call.id", call.call_id)
            span.set_attribute("shuttle.workflow_id", call.workflow_id)
            outcome = await self._inner.execute(call)
            span.set_attribute("shuttle.tool.blocked", outcome.blocked)
            if outcome.error:
                span.set_attribute("error.type", "tool_error")
                span.set_status(Status(StatusCode.ERROR, outcome.error[:200]))
        result = "blocked" if outcome.blocked else ("error" if outcome.error else "ok")
        TOOL_CALLS.labels(call.tool_name, result).inc()
        TOOL_SECONDS.labels(call.tool_name).observe(outcome.duration_ms / 1000)
        return outcome
