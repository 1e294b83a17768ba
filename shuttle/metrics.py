"""Every Prometheus metric Shuttle exports, in one place; each process updates its own."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
from prometheus_client import Counter, Gauge, Histogram, start_http_server

from shuttle.grpc_handlers import MethodHandler, with_behaviour

# -- runs (executor) ------------------------------------------------------------------------
RUNS_STARTED = Counter("shuttle_runs_started_total", "Runs started.")
RUNS_FINISHED = Counter("shuttle_runs_finished_total", "Runs finished, by outcome.", ["status"])
RUN_ITERATIONS = Histogram(
    "shuttle_run_iterations", "Tool-loop iterations per run.", buckets=(1, 2, 3, 5, 8, 13, 21, 50)
)
RUNS_RESUMED = Counter(
    "shuttle_runs_resumed_total", "Runs taken over from another executor and resumed here."
)
RUN_TAKEOVER_SECONDS = Histogram(
    "shuttle_run_takeover_seconds",
    "From a run's lease lapsing or being handed over to the run resuming on this replica.",
    buckets=(0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120),
)
LLM_CALLS = Counter("shuttle_llm_calls_total", "Model calls.", ["model", "outcome"])
LLM_TOKENS = Counter("shuttle_llm_tokens_total", "Tokens by model.", ["model", "direction"])
LLM_COST = Counter("shuttle_llm_cost_usd_total", "Estimated cost by model.", ["model"])

# -- tools ----------------------------------------------------------------------------------
TOOL_CALLS = Counter("shuttle_tool_calls_total", "Tool calls by outcome.", ["tool", "outcome"])
TOOL_SECONDS = Histogram("shuttle_tool_duration_seconds", "Tool call duration.", ["tool"])
HOOK_BLOCKS = Counter("shuttle_hook_blocks_total", "Tool calls blocked by a hook.", ["hook"])
APPROVALS_PENDING = Gauge("shuttle_approvals_pending", "Approvals waiting for a decision.")

# -- event log ------------------------------------------------------------------------------
EVENTS_APPENDED = Counter("shuttle_events_appended_total", "Events appended by type.", ["type"])
SUBSCRIBER_CATCHUPS = Counter(
    "shuttle_subscriber_catchups_total", "Stream readers that fell behind and read from SQL."
)
COMMAND_FEEDS = Gauge("shuttle_events_command_feeds", "Open FollowCommands calls.")
APPEND_STREAMS = Gauge("shuttle_events_append_streams", "Open AppendStream calls.")
COMMAND_WATCHES = Gauge(
    "shuttle_events_command_watches", "Workflows whose commands a FollowCommands call follows."
)
SUBSCRIBER_LAG = Histogram(
    "shuttle_subscriber_lag_events",
    "How far behind the newest event a stream reader was when it read.",
    buckets=(0, 1, 10, 100, 1_000, 10_000),
)

# -- gateway --------------------------------------------------------------------------------
SSE_CONNECTIONS = Gauge("shuttle_sse_connections", "Open SSE streams.", ["dialect"])
SSE_FEEDS = Gauge(
    "shuttle_sse_feeds", "Workflows followed by this gateway, one upstream call each."
)
SSE_CATCHUPS = Counter(
    "shuttle_sse_catchups_total",
    "SSE streams that read on their own upstream call (resumed from before the shared feed's "
    "buffer, or fell behind it).",
)

# -- gRPC -----------------------------------------------------------------------------------
GRPC_SECONDS = Histogram(
    "shuttle_grpc_server_handling_seconds",
    "Server-side gRPC latency (streams: until the last message).",
    ["method", "code"],
)


def serve_metrics(host: str, port: int) -> None:
    """Expose /metrics of a gRPC service on its own HTTP port (a background thread)."""
    start_http_server(port, addr=host)


Handler = Callable[..., Any]


class MetricsInterceptor(grpc.aio.ServerInterceptor):
    """Times every RPC; a hand-written interceptor because the maintained Prometheus ones
    target the synchronous server only."""

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[MethodHandler | None]],
        details: grpc.HandlerCallDetails,
    ) -> MethodHandler | None:
        handler = await continuation(details)
        method = details.method
        # A stream of requests lasts as long as the process that opened it; AppendStream
        # times each of its batches itself.
        if (
            handler is None
            or handler.request_streaming
            or method.startswith("/grpc.health")
            or method.startswith("/grpc.reflection")
        ):
            return handler
        return with_behaviour(
            handler, lambda b: _timed_unary(method, b), lambda b: _timed_stream(method, b)
        )


def _code_of(context: grpc.aio.ServicerContext[Any, Any], failed: bool) -> str:
    code = context.code()
    if code is None:
        return "UNKNOWN" if failed else "OK"
    return str(code.name) if isinstance(code, grpc.StatusCode) else str(code)


def _timed_unary(method: str, behaviour: Handler) -> Handler:
    async def timed(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        started = time.perf_counter()
        failed = True
        try:
            response = await behaviour(request, context)
            failed = False
            return response
        finally:
            code = _code_of(context, failed)
            GRPC_SECONDS.labels(method, code).observe(time.perf_counter() - started)

    return timed


def _timed_stream(method: str, behaviour: Handler) -> Handler:
    async def timed(
        request: Any, context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[Any]:
        started = time.perf_counter()
        failed = True
        try:
            async for message in behaviour(request, context):
                yield message
            failed = False
        finally:
            code = _code_of(context, failed)
            GRPC_SECONDS.labels(method, code).observe(time.perf_counter() - started)

    return timed
