"""`python -m services.tools`: serve shuttle.v1.ToolService (default 127.0.0.1:50052)."""

from __future__ import annotations

import grpc

from services.tools.builtins import default_tools
from services.tools.catalog import ToolRegistry
from services.tools.grpc_api import SERVICE_NAME, ToolServiceServicer
from services.tools.host import ToolHost
from shuttle.grpc_server import GrpcService
from shuttle.process import main
from shuttle.settings import Settings
from shuttle.v1 import tools_pb2_grpc


def service_for(host: ToolHost) -> GrpcService:
    """A GrpcService (with health and reflection) serving ToolService over `host`."""
    servicer = ToolServiceServicer(host)

    def register(server: grpc.aio.Server) -> None:
        tools_pb2_grpc.add_ToolServiceServicer_to_server(servicer, server)

    return GrpcService(name="tools", service_names=[SERVICE_NAME], register=register)


async def build(settings: Settings) -> GrpcService:
    """The tools service as configured: the built-in tools behind one ToolHost."""
    registry = ToolRegistry(default_tools())
    host = ToolHost(registry, default_timeout_seconds=settings.tool_timeout_seconds)
    return service_for(host)


if __name__ == "__main__":
    main("tools", build)
