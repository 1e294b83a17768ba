"""Helpers for the call-ledger tests: a tool the test holds mid-call, file_ops appends
counted by lines, and tools servers (port 0) whose calls go through the ledger."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc
from sqlalchemy.ext.asyncio import AsyncEngine

from services.tools.__main__ import service_for
from services.tools.builtins import BuiltinConfig, default_tools
from services.tools.catalog import ToolOutput, ToolRegistry, ToolSpec
from services.tools.context import safe_segment
from services.tools.db import create_schema
from services.tools.host import ToolHost
from services.tools.ledger import CallLedger, LedgerEntry
from services.tools.ledger_storage import open_ledger
from services.tools.recorded import RecordedCalls
from services.tools.workspace import Workspaces
from shuttle.sql_transactions import EngineWrites, writes_for
from shuttle.tool_calls import ToolCall
from shuttle.v1 import tools_pb2, tools_pb2_grpc

if TYPE_CHECKING:
    from shuttle.v1.tools_pb2_grpc import ToolServiceAsyncStub

TENANT = "acme"
WORKFLOW = "wf-ledger"
LOG_FILE = "calls.log"


class Held:
    """Counts its runs and holds each one until the test releases it."""

    spec = ToolSpec(
        name="held",
        description="Waits until the test lets it finish.",
        parameters={"type": "object", "properties": {"note": {"type": "string"}}},
        category="test",
    )

    def __init__(self) -> None:
        self.runs = 0
        self.started = asyncio.Event()
        self.release = asyncio.Event()

    async def run(self, args: dict[str, Any]) -> ToolOutput:
        self.runs += 1
        self.started.set()
        await self.release.wait()
        return ToolOutput(text=f"{args.get('note', '')}: run #{self.runs}")


def registry_with(root: Path, *extra: Any) -> ToolRegistry:
    """The built-ins, file_ops on workspaces under `root`, and `extra` tools."""
    config = BuiltinConfig(workspaces=Workspaces(root, 10 * 1024 * 1024))
    return ToolRegistry([*default_tools(config), *extra])


def request(
    tool: str,
    arguments: dict[str, Any],
    call_id: str = "c1",
    *,
    tenant: str = TENANT,
    workflow_id: str = WORKFLOW,
) -> tools_pb2.ExecuteRequest:
    return tools_pb2.ExecuteRequest(
        workflow_id=workflow_id,
        tenant_id=tenant,
        call_id=call_id,
        agent_id="agent-main",
        tool_name=tool,
        arguments_json=json.dumps(arguments),
    )


def append(line: str, call_id: str = "c1", **kwargs: Any) -> tools_pb2.ExecuteRequest:
    """file_ops appending `line` to the workflow's log file: a side effect counted by lines."""
    arguments = {"operation": "append", "path": LOG_FILE, "content": f"{line}\n"}
    return request("file_ops", arguments, call_id, **kwargs)


def logged_lines(workspace_root: Path, workflow_id: str = WORKFLOW) -> list[str]:
    path = workspace_root / TENANT / safe_segment(workflow_id, "") / LOG_FILE
    return path.read_text().splitlines() if path.exists() else []


def stub_for(channel: grpc.aio.Channel) -> ToolServiceAsyncStub:
    return tools_pb2_grpc.ToolServiceStub(channel)


def reading(engine: AsyncEngine) -> CallLedger:
    """A ledger on `engine` for reading rows (it starts no writer thread)."""
    return CallLedger(engine, EngineWrites(engine))


async def ledger_entry(ledger: CallLedger, call_id: str = "c1") -> LedgerEntry | None:
    return await ledger.get(ToolCall(tool_name="", workflow_id=WORKFLOW, call_id=call_id))


@dataclass
class Replica:
    port: int
    recorded: RecordedCalls
    ledger: CallLedger

    def channel(self) -> grpc.aio.Channel:
        return grpc.aio.insecure_channel(f"127.0.0.1:{self.port}")


@asynccontextmanager
async def ledger_server(
    engine: AsyncEngine, registry: ToolRegistry, replica: str = ""
) -> AsyncIterator[Replica]:
    """A tools server on port 0 over `registry`, recording its calls in `engine`'s ledger."""
    await create_schema(engine)
    host = ToolHost(registry)
    writes = writes_for(engine)
    ledger, close_ledger = await open_ledger(engine, writes)  # as the service opens it
    recorded = RecordedCalls(host, ledger, replica=replica)
    service = service_for(
        host,
        recorded=recorded,
        on_stop=[partial(recorded.close, 10.0), close_ledger, writes.close],
    )
    port = await service.start("127.0.0.1", 0)
    try:
        yield Replica(port, recorded, ledger)
    finally:
        await service.stop(grace=0)
