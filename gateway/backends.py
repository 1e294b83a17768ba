"""The gateway's gRPC clients, opened once per process."""

from __future__ import annotations

from dataclasses import dataclass

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from shuttle.events_client import EventsClient
from shuttle.grpc_auth import GATEWAY, ChannelAuth
from shuttle.grpc_client import open_channel, tenant_metadata
from shuttle.settings import Settings
from shuttle.v1 import executor_pb2_grpc, tools_pb2_grpc

BACKEND_NAMES = ("executor", "events", "tools", "planner")
__all__ = ["BACKEND_NAMES", "Backends", "tenant_metadata"]


@dataclass
class Backends:
    executor: executor_pb2_grpc.ExecutorServiceAsyncStub
    events: EventsClient
    tools: tools_pb2_grpc.ToolServiceAsyncStub
    channels: dict[str, grpc.aio.Channel]

    @classmethod
    def connect(cls, settings: Settings) -> Backends:
        presented = ChannelAuth.for_component(settings, GATEWAY)
        channels = {
            name: open_channel(settings.grpc_target(name), presented) for name in BACKEND_NAMES
        }
        return cls(
            executor=executor_pb2_grpc.ExecutorServiceStub(channels["executor"]),
            events=EventsClient(channels["events"], retry_seconds=settings.events_retry_seconds),
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
