"""ToolService over a real grpc.aio server on a free port, through the generated stub."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from services.tools.__main__ import build
from services.tools.grpc_api import SERVICE_NAME
from shuttle.settings import Settings
from shuttle.v1 import tools_pb2, tools_pb2_grpc

if TYPE_CHECKING:
    # Only the type stubs define the aio stub class; at run time ToolServiceStub serves both.
    from shuttle.v1.tools_pb2_grpc import ToolServiceAsyncStub as Stub


async def test_list_tools_all_and_filtered(stub: Stub) -> None:
    everything = await stub.ListTools(tools_pb2.ListToolsRequest())
    names = [tool.name for tool in everything.tools]
    assert names[0] == "calculator"
    assert set(names) == {
        "calculator",
        "datetime",
        "json_transform",
        "text_utils",
        "boom",
        "refuse",
        "hang",
        "inner_timeout",
        "sloppy",
        "repeat",
    }

    math_only = await stub.ListTools(tools_pb2.ListToolsRequest(category="math"))
    [calc] = math_only.tools
    assert calc.name == "calculator"
    assert calc.category == "math"
    assert calc.description
    assert calc.flags.read_only is True
    assert calc.flags.requires_approval is False
    assert calc.flags.timeout_seconds == 30.0  # the host default, since the spec sets none
    parameters = json.loads(calc.parameters_json)
    assert parameters["required"] == ["expression"]
    assert parameters["properties"]["expression"]["type"] == "string"

    by_name = await stub.ListTools(tools_pb2.ListToolsRequest(names=["hang", "repeat"]))
    assert [tool.name for tool in by_name.tools] == ["hang", "repeat"]
    assert by_name.tools[0].flags.timeout_seconds == 0.05

    read_only = await stub.ListTools(tools_pb2.ListToolsRequest(read_only_only=True))
    assert [tool.name for tool in read_only.tools] == [
        "calculator",
        "datetime",
        "json_transform",
        "text_utils",
        "repeat",
    ]


async def test_execute_success(stub: Stub) -> None:
    response = await stub.Execute(
        tools_pb2.ExecuteRequest(
            workflow_id="wf-1",
            tenant_id="default",
            call_id="c-7",
            tool_name="calculator",
            arguments_json=json.dumps({"expression": "12*7"}),
            agent_id="agent-main",
        )
    )
    assert response.call_id == "c-7"
    assert response.observation == "84"
    assert response.error == ""
    assert not response.blocked and not response.truncated


@pytest.mark.parametrize(
    ("tool", "arguments", "fragment"),
    [
        ("nope", "{}", "unknown tool 'nope'; available tools: calculator"),
        ("calculator", "{not json", "are not valid JSON"),
        ("calculator", '{"expression": 1}', "field 'expression'"),
        ("calculator", '{"expression": "1/0"}', "calculator: division by zero"),
        ("boom", "{}", "tool boom failed: RuntimeError: the widget fell over"),
        ("hang", "{}", "timed out after 0.05 seconds"),
    ],
)
async def test_tool_failures_travel_in_the_response(
    stub: Stub, tool: str, arguments: str, fragment: str
) -> None:
    response = await stub.Execute(
        tools_pb2.ExecuteRequest(call_id="c-1", tool_name=tool, arguments_json=arguments)
    )
    assert response.call_id == "c-1"
    assert fragment in response.error
    assert response.observation == f"Error: {response.error}"


async def test_truncated_output_survives_the_wire(stub: Stub) -> None:
    text = "x" * 19_999 + "😀🎉" + "y" * 5_000
    response = await stub.Execute(
        tools_pb2.ExecuteRequest(tool_name="repeat", arguments_json=json.dumps({"text": text}))
    )
    assert response.truncated
    assert response.observation.startswith("x" * 19_999 + "😀\n…[truncated: 25,001 characters")


async def test_missing_tool_name_is_invalid_argument(stub: Stub) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.Execute(tools_pb2.ExecuteRequest(arguments_json="{}"))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert caught.value.details() == "ExecuteRequest.tool_name is required"


async def test_approvals_without_a_database_say_so(stub: Stub) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.DecideApproval(
            tools_pb2.DecideApprovalRequest(approval_id="a-1", decision="approved")
        )
    assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "no database configured" in (caught.value.details() or "")
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.ListApprovals(tools_pb2.ListApprovalsRequest(workflow_id="wf-1"))
    assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION


async def test_health_serving(channel: grpc.aio.Channel) -> None:
    health = health_pb2_grpc.HealthStub(channel)
    for service in ("", SERVICE_NAME):
        response = await health.Check(health_pb2.HealthCheckRequest(service=service))
        assert response.status == health_pb2.HealthCheckResponse.SERVING


async def test_reflection_lists_the_tool_service(channel: grpc.aio.Channel) -> None:
    reflection = reflection_pb2_grpc.ServerReflectionStub(channel)
    requests = [
        reflection_pb2.ServerReflectionRequest(list_services=""),
        reflection_pb2.ServerReflectionRequest(file_containing_symbol=SERVICE_NAME),
    ]
    responses = [response async for response in reflection.ServerReflectionInfo(iter(requests))]
    listed = {service.name for service in responses[0].list_services_response.service}
    assert SERVICE_NAME == "shuttle.v1.ToolService"
    assert SERVICE_NAME in listed
    assert "grpc.health.v1.Health" in listed
    assert responses[1].file_descriptor_response.file_descriptor_proto  # descriptors resolvable


async def test_build_serves_the_builtins_from_settings(tmp_path: Path) -> None:
    service = await build(
        Settings(tools_port=0, tool_timeout_seconds=12.0, data_dir=tmp_path, database_url="")
    )
    port = await service.start("127.0.0.1", 0)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = tools_pb2_grpc.ToolServiceStub(channel)
            listed = await stub.ListTools(tools_pb2.ListToolsRequest())
            assert [tool.name for tool in listed.tools] == [
                "calculator",
                "datetime",
                "json_transform",
                "text_utils",
                "file_ops",
                "http_request",
                "web_fetch",
            ]  # python_exec stays off unless enabled
            assert listed.tools[0].flags.timeout_seconds == 12.0
            response = await stub.Execute(
                tools_pb2.ExecuteRequest(
                    tool_name="calculator", arguments_json='{"expression": "sqrt(2) ** 2"}'
                )
            )
            assert response.observation == "2"
    finally:
        await service.stop(grace=0)
