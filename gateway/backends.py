"""The gateway's gRPC clients, opened once per process."""

from __future__ import annotations

from dataclasses import dataclass

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from shuttle.grpc_client import open_channel
from shuttle.settings import Settings
from shuttle.v1 import events_pb2_grpc, executor_pb2_grpc, tools_pb2_grpc

BACKEND_NAMES = ("executor", "events", "tools", "planner")

TENANT_HEADER = "x-shuttle-tenant"


def tenant_metadata(tenant_id: str) -> tuple[tuple[str, str], ...]:
    """The caller's tenant as gRPC metadata, alongside the request's `tenant_id` field."""
    return ((TENANT_HEADER, tenant_id),)


@dataclass
class Backends:
    executor: executor_pb2_grpc.ExecutorServiceAsyncStub
    events: events_pb2_grpc.EventServiceAsyncStub
    tools: tools_pb2_grpc.ToolServiceAsyncStub
    channels: dict[str, grpc.aio.Channel]

    @classmethod
    def connect(cls, settings: Settings) -> Backends:
        channels = {name: open_channel(settings.grpc_target(name)) for name in BACKEND_NAMES}
        return cls(
            executor=executor_pb2_grpc.ExecutorServiceStub(channels["executor"]),
            events=events_pb2_grpc.EventServiceStub(channels["events"]),
            tools=tools_pb2_grpc.ToolServiceStub(channels["tools"]),
            channels=channels,
        )

    async def health(self) -> dict[str, str]:
        """SERVING / NOT_SERVING / UNAVAILABLE per backend."""
        report: dict[str, str] = {}
        for name, channel in self.channels.items():
            stub = health_pb2_grpc.HealthStub(channel)
            try:
                reply = await stub.Check(health_pb2.HealthCheckRequest(), timeout=2.0)
                report[name] = health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
            except grpc.aio.AioRpcError as exc:
                report[name] = exc.code().name
        return report

    async def close(self) -> None:
        for channel in self.channels.values():
            await channel.close()
