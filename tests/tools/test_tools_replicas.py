"""Two tools-service processes on one SHUTTLE_TOOL_WORKSPACE_DIR, as replicas behind one
address: a run's workspace is the same whichever replica a call reaches, and its quota
holds across both."""

from __future__ import annotations

import asyncio
import json
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import grpc
import pytest

from services.tools.context import safe_segment
from shuttle.v1 import tools_pb2, tools_pb2_grpc
from tests.support.processes import start_service_process, stop_process

pytestmark = pytest.mark.integration

QUOTA = 20_000
FILE_BYTES = 1_000
# Files already in a folder of the workspace: each quota check walks them after it has
# counted the files at the top, which widens the window in which two replicas' unserialised
# checks would both pass.
FILLER_FILES = 10_000


@pytest.fixture
def replica_ports(tmp_path: Path) -> Iterator[list[int]]:
    shared = tmp_path / "workspaces"
    started: list[subprocess.Popen[bytes]] = []
    ports: list[int] = []
    try:
        for name in ("a", "b"):
            process, port = start_service_process(
                "tools",
                {
                    "SHUTTLE_DATA_DIR": str(tmp_path / name),
                    "SHUTTLE_DATABASE_URL": "",
                    "SHUTTLE_TOOL_WORKSPACE_DIR": str(shared),
                    "SHUTTLE_TOOL_WORKSPACE_QUOTA_BYTES": str(QUOTA),
                },
                tmp_path / f"tools-{name}.log",
            )
            started.append(process)
            ports.append(port)
        yield ports
    finally:
        for process in started:
            stop_process(process)


@pytest.fixture
async def replicas(replica_ports: list[int]) -> AsyncIterator[list[grpc.aio.Channel]]:
    """A channel to each replica."""
    channels = [grpc.aio.insecure_channel(f"127.0.0.1:{port}") for port in replica_ports]
    yield channels
    for channel in channels:
        await channel.close()


async def file_ops(
    channel: grpc.aio.Channel, call: str, **arguments: str
) -> tools_pb2.ExecuteResponse:
    stub = tools_pb2_grpc.ToolServiceStub(channel)
    reply: tools_pb2.ExecuteResponse = await stub.Execute(
        tools_pb2.ExecuteRequest(
            workflow_id="wf-shared",
            tenant_id="acme",
            call_id=call,
            tool_name="file_ops",
            arguments_json=json.dumps(arguments),
        ),
        timeout=60,
    )
    return reply


async def test_a_file_written_through_one_replica_is_read_through_the_other(
    replicas: list[grpc.aio.Channel],
) -> None:
    a, b = replicas
    wrote = await file_ops(a, "c1", operation="write", path="notes/plan.txt", content="step 1")
    assert wrote.error == "", wrote.observation
    read = await file_ops(b, "c2", operation="read", path="notes/plan.txt")
    assert (read.error, read.observation) == ("", "step 1")


async def test_the_quota_holds_across_replicas_writing_at_once(
    replicas: list[grpc.aio.Channel], tmp_path: Path
) -> None:
    workspace = tmp_path / "workspaces" / "acme" / safe_segment("wf-shared", "")
    (workspace / "filler").mkdir(parents=True)
    for index in range(FILLER_FILES):
        (workspace / "filler" / f"{index}").touch()
    attempts = 3 * QUOTA // FILE_BYTES
    replies = await asyncio.gather(
        *(
            file_ops(
                replicas[index % 2], f"w{index}", operation="write", path=f"{index}.txt",
                content="x" * FILE_BYTES,
            )
            for index in range(attempts)
        )
    )  # fmt: skip
    written = [reply for reply in replies if not reply.error]
    refused = [reply for reply in replies if reply.error]
    assert len(written) == QUOTA // FILE_BYTES
    assert all("quota" in reply.observation for reply in refused)
    on_disk = sum(path.stat().st_size for path in workspace.rglob("*") if path.is_file())
    assert on_disk <= QUOTA
