"""`python -m services.events` as a real process: default SQLite file, health, SIGTERM."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from shuttle.v1 import events_pb2, events_pb2_grpc

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.mark.integration
async def test_module_serves_and_stops_on_sigterm(tmp_path: Path) -> None:
    port = free_port()
    data_dir = tmp_path / "var"
    env = {
        **os.environ,
        "SHUTTLE_EVENTS_PORT": str(port),
        "SHUTTLE_DATA_DIR": str(data_dir),
        "SHUTTLE_DATABASE_URL": "",
        "SHUTTLE_LOG_FORMAT": "text",
    }
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "services.events", cwd=REPO, env=env
    )
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            health = health_pb2_grpc.HealthStub(channel)
            response = await health.Check(
                health_pb2.HealthCheckRequest(service="shuttle.v1.EventService"),
                wait_for_ready=True,
            )
            assert response.status == health_pb2.HealthCheckResponse.SERVING
            stub = events_pb2_grpc.EventServiceStub(channel)
            created = await stub.CreateWorkflow(events_pb2.CreateWorkflowRequest(tenant_id="t1"))
            assert created.workflow_id.startswith("wf-")
        assert (data_dir / "shuttle.db").is_file()  # the default SQLite file, dir created
        process.send_signal(signal.SIGTERM)
        assert await process.wait() == 0
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
