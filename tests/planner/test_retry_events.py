"""A planner call made for a workflow shows its model retries on that workflow's log."""

from __future__ import annotations

import json
from pathlib import Path

from services.events.__main__ import build as build_events
from services.planner.__main__ import build as build_planner
from shuttle.envelope import type_name
from shuttle.grpc_client import open_channel, tenant_metadata
from shuttle.settings import Settings
from shuttle.v1 import common_pb2, events_pb2, events_pb2_grpc, planner_pb2, planner_pb2_grpc
from tests.support.scripted_openai import ScriptedOpenAI, error, tool_call


async def test_route_retries_are_reported_to_the_run(
    server: ScriptedOpenAI, tmp_path: Path
) -> None:
    models = tmp_path / "models.yaml"
    models.write_text(
        "models:\n"
        f"  - {{name: main, base_url: '{server.base_url}', model: scripted-model,\n"
        "      roles: [general, fast, reasoning, compact],\n"
        "      abilities: {tool_call: true, json_mode: true}}\n",
        encoding="utf-8",
    )
    events_service = await build_events(Settings(data_dir=tmp_path, database_url=""))
    events_port = await events_service.start("127.0.0.1", 0)
    planner_service = await build_planner(
        Settings(
            models_file=models,
            llm_max_retries=2,
            llm_retry_base_seconds=0.01,
            events_port=events_port,
        )
    )
    planner_port = await planner_service.start("127.0.0.1", 0)
    events_channel = open_channel(f"127.0.0.1:{events_port}")
    planner_channel = open_channel(f"127.0.0.1:{planner_port}")
    try:
        events = events_pb2_grpc.EventServiceStub(events_channel)
        workflow = await events.CreateWorkflow(
            events_pb2.CreateWorkflowRequest(tenant_id="acme", query="plan an offsite")
        )
        server.script(
            error(503, "overloaded"),
            tool_call("route_task", {"mode": "COMPLEX", "estimated_complexity": 0.8}),
        )
        decision = await planner_pb2_grpc.PlannerServiceStub(planner_channel).Route(
            planner_pb2.RouteRequest(
                workflow_id=workflow.workflow_id, query="Organise a company offsite"
            ),
            metadata=tenant_metadata("acme"),
        )
        assert decision.mode == common_pb2.MODE_COMPLEX
        page = await events.List(
            events_pb2.ListRequest(workflow_id=workflow.workflow_id, tenant_id="acme"),
            metadata=tenant_metadata("acme"),
        )
    finally:
        await events_channel.close()
        await planner_channel.close()
        await planner_service.stop(0)
        await events_service.stop(0)

    logged = [(type_name(e.type), e.agent_id, json.loads(e.payload_json)) for e in page.events]
    assert [(kind, agent) for kind, agent, _ in logged] == [
        ("ERROR_OCCURRED", "planner"),
        ("ERROR_RECOVERY", "planner"),
    ]
    occurred, recovery = logged[0][2], logged[1][2]
    assert occurred["recoverable"] is True and occurred["fatal"] is False
    assert occurred["retry_count"] == 1 and occurred["max_retries"] == 2
    assert "overloaded" in occurred["error_message"]
    assert recovery["success"] is True and recovery["attempt"] == 2
