"""CPU per unary gRPC call for tracing: no interceptors, OpenTelemetry's, and Shuttle's.

The server answers a fixed `ToolService.Execute` response in a process of its own (CPU read
from /proc); the client calls it one call after another under an unsampled trace in a
process that exports nothing, as every Shuttle service does on its defaults. Sides take turns.

    .venv/bin/python -m bench.suites.grpc_tracing [--calls 3000] [--turns 3]
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import time
from collections.abc import Callable
from typing import Any

import grpc
from opentelemetry.instrumentation.grpc import aio_client_interceptors, aio_server_interceptor
from opentelemetry.propagate import extract
from opentelemetry.sdk.trace import TracerProvider

from bench.support.meters import cpu_seconds
from bench.support.results import add_common_arguments, save, sized
from shuttle.event_loop import run
from shuttle.grpc_tracing import client_interceptors, server_interceptors, traced
from shuttle.settings import Settings
from shuttle.telemetry import configure_tracing
from shuttle.v1 import tools_pb2, tools_pb2_grpc

SIDES = ("none", "OpenTelemetry", "Shuttle")
UNSAMPLED_CALLER = {"traceparent": f"00-{'ab' * 16}-{'cd' * 8}-00"}


def _server_interceptors(side: str) -> list[Any]:
    if side == "none":
        return []
    if side == "OpenTelemetry":
        return [aio_server_interceptor(filter_=traced)]  # type: ignore[no-untyped-call]
    return server_interceptors()


def _client_interceptors(side: str) -> list[Any] | None:
    if side == "none":
        return None
    if side == "OpenTelemetry":
        return list(aio_client_interceptors(filter_=traced))  # type: ignore[no-untyped-call]
    return client_interceptors()


async def _execute(request: tools_pb2.ExecuteRequest, context: Any) -> tools_pb2.ExecuteResponse:
    return tools_pb2.ExecuteResponse(call_id=request.call_id, observation="84")


EXECUTE = grpc.unary_unary_rpc_method_handler(
    _execute,
    request_deserializer=tools_pb2.ExecuteRequest.FromString,
    response_serializer=tools_pb2.ExecuteResponse.SerializeToString,
)


def _serve(side: str, ports: Any) -> None:
    async def main() -> None:
        configure_tracing(Settings(otel_traces_exporter="none"), "bench")
        server = grpc.aio.server(interceptors=_server_interceptors(side))
        server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler("shuttle.v1.ToolService", {"Execute": EXECUTE}),)
        )
        ports.put(server.add_insecure_port("127.0.0.1:0"))
        await server.start()
        await server.wait_for_termination()

    run(main(), "auto")


async def _calls(port: int, side: str, pid: int, calls: int) -> dict[str, float]:
    request = tools_pb2.ExecuteRequest(call_id="c", tool_name="calculator", arguments_json="{}")
    target = f"127.0.0.1:{port}"
    async with grpc.aio.insecure_channel(target, interceptors=_client_interceptors(side)) as ch:
        execute: Callable[..., Any] = tools_pb2_grpc.ToolServiceStub(ch).Execute
        for _ in range(200):
            await execute(request)
        server_before, client_before = cpu_seconds(pid), time.process_time()
        latencies = []
        for _ in range(calls):
            started = time.perf_counter()
            await execute(request)
            latencies.append(time.perf_counter() - started)
        return {
            "server_cpu_ms": (cpu_seconds(pid) - server_before) / calls * 1000,
            "client_cpu_ms": (time.process_time() - client_before) / calls * 1000,
            "p50_ms": statistics.median(latencies) * 1000,
        }


async def measure(calls: int, turns: int) -> dict[str, dict[str, float]]:
    provider = configure_tracing(Settings(otel_traces_exporter="none"), "bench")
    assert isinstance(provider, TracerProvider)
    servers = {}
    spawn = multiprocessing.get_context("spawn")  # a fresh process, as a service starts
    for side in SIDES:
        ports: Any = spawn.Queue()
        process = spawn.Process(target=_serve, args=(side, ports), daemon=True)
        process.start()
        servers[side] = (process, ports.get(timeout=30))
    trials: dict[str, list[dict[str, float]]] = {side: [] for side in SIDES}
    try:
        with provider.get_tracer("bench").start_as_current_span(
            "run", context=extract(UNSAMPLED_CALLER)
        ):
            for _ in range(turns):
                for side, (process, port) in servers.items():
                    assert process.pid is not None
                    trials[side].append(await _calls(port, side, process.pid, calls))
    finally:
        for process, _ in servers.values():
            process.kill()
    return {
        side: {key: statistics.median(t[key] for t in runs) for key in runs[0]}
        for side, runs in trials.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, help="calls per side and turn (3000; quick 500)")
    parser.add_argument("--turns", type=int, default=3, help="turns of all sides")
    add_common_arguments(parser)
    args = parser.parse_args()
    calls = sized(args.calls, args.quick, 3000, 500)
    figures = run(measure(calls, args.turns), "auto")
    print(f"{'interceptors':14} {'server CPU':>12} {'client CPU':>12} {'p50':>9}  (ms per call)")
    for side, f in figures.items():
        print(f"{side:14} {f['server_cpu_ms']:12.3f} {f['client_cpu_ms']:12.3f} {f['p50_ms']:9.3f}")
    save(args.json, "grpc_tracing", {"calls": calls, "turns": args.turns}, figures)


if __name__ == "__main__":
    main()
