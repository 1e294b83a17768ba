"""PlannerService over a real gRPC server on port 0, models behind the scripted provider."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

from services.planner.__main__ import build
from shuttle.grpc_client import open_channel
from shuttle.settings import Settings
from shuttle.v1 import common_pb2, planner_pb2, planner_pb2_grpc
from tests.support.scripted_openai import ScriptedOpenAI, text, tool_call

SCHEMA = json.dumps({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]})
USER = [common_pb2.ChatMessage(role="user", content="give me n")]


@pytest.fixture
async def planner(
    server: ScriptedOpenAI, tmp_path: Path
) -> AsyncIterator[planner_pb2_grpc.PlannerServiceAsyncStub]:
    models = tmp_path / "models.yaml"
    models.write_text(
        "models:\n"
        f"  - {{name: main, base_url: '{server.base_url}', model: scripted-model,\n"
        "      roles: [general, fast, reasoning],\n"
        "      abilities: {tool_call: true, json_mode: true},\n"
        "      prices: {input_per_1m: 1, output_per_1m: 2}}\n"
        "  - {name: offline, provider: demo, roles: [compact]}\n",
        encoding="utf-8",
    )
    service = await build(Settings(models_file=models, llm_max_retries=0))
    port = await service.start("127.0.0.1", 0)
    channel = open_channel(f"127.0.0.1:{port}")
    yield planner_pb2_grpc.PlannerServiceStub(channel)
    await channel.close()
    await service.stop(0)


async def test_structured_call_returns_value_level_attempts_and_usage(
    planner: planner_pb2_grpc.PlannerServiceAsyncStub, server: ScriptedOpenAI
) -> None:
    server.script(text("not json"), text('{"n": 5}'))
    reply = await planner.StructuredCall(
        planner_pb2.StructuredCallRequest(messages=USER, json_schema=SCHEMA, schema_name="give")
    )
    assert json.loads(reply.value_json) == {"n": 5}
    assert reply.level == planner_pb2.STRUCTURED_LEVEL_JSON_MODE and reply.attempts == 2
    assert reply.usage.output_tokens == 14 and reply.usage.cost_usd > 0


async def test_a_structured_value_holding_an_escaped_lone_surrogate_comes_back_whole(
    planner: planner_pb2_grpc.PlannerServiceAsyncStub, server: ScriptedOpenAI
) -> None:
    # The arguments escape it as JSON may; parsed, it is text protobuf cannot carry as is.
    server.script(tool_call("give", {"n": 5, "file": "caf\udce9.txt"}))
    reply = await planner.StructuredCall(
        planner_pb2.StructuredCallRequest(messages=USER, json_schema=SCHEMA, schema_name="give")
    )
    assert json.loads(reply.value_json) == {"n": 5, "file": "caf\udce9.txt"}


async def test_structured_call_default_and_failure(
    planner: planner_pb2_grpc.PlannerServiceAsyncStub, server: ScriptedOpenAI
) -> None:
    server.set_handler(lambda body: text("nope"))
    reply = await planner.StructuredCall(
        planner_pb2.StructuredCallRequest(
            messages=USER, json_schema=SCHEMA, default_value_json='{"n": 0}'
        )
    )
    assert reply.level == planner_pb2.STRUCTURED_LEVEL_DEFAULT and reply.attempts == 5
    assert json.loads(reply.value_json) == {"n": 0}
    with pytest.raises(grpc.aio.AioRpcError) as failure:
        await planner.StructuredCall(
            planner_pb2.StructuredCallRequest(messages=USER, json_schema=SCHEMA)
        )
    assert failure.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "no valid structured output after 5 call(s)" in str(failure.value.details())


@pytest.mark.parametrize(
    ("request_fields", "message"),
    [
        ({"json_schema": "{not json"}, "json_schema is not valid JSON"),
        ({"json_schema": '{"type": "array"}'}, "json_schema must describe an object"),
        ({"json_schema": '{"type": "object", "required": 5}'}, "not a valid JSON Schema"),
        ({"json_schema": ""}, "json_schema is required"),
        ({"messages": []}, "messages must not be empty"),
        (
            {"messages": [common_pb2.ChatMessage(role="robot", content="x")]},
            "messages[0].role must be one of",
        ),
        ({"default_value_json": "{oops"}, "default_value_json is not valid JSON"),
        ({"model_role": "gigantic"}, "model_role: unknown model role 'gigantic'"),
    ],
)
async def test_bad_structured_requests_are_invalid_arguments(
    planner: planner_pb2_grpc.PlannerServiceAsyncStub,
    server: ScriptedOpenAI,
    request_fields: dict[str, object],
    message: str,
) -> None:
    fields: dict[str, object] = {"messages": USER, "json_schema": SCHEMA, **request_fields}
    with pytest.raises(grpc.aio.AioRpcError) as failure:
        await planner.StructuredCall(planner_pb2.StructuredCallRequest(**fields))  # type: ignore[arg-type]
    assert failure.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert message in str(failure.value.details())
    assert server.requests == []


async def test_the_model_role_picks_the_model(
    planner: planner_pb2_grpc.PlannerServiceAsyncStub, server: ScriptedOpenAI
) -> None:
    # "compact" is the offline demo model here: it cannot produce the object, so the default.
    reply = await planner.StructuredCall(
        planner_pb2.StructuredCallRequest(
            messages=USER, json_schema=SCHEMA, model_role="compact", default_value_json='{"n": 1}'
        )
    )
    assert reply.level == planner_pb2.STRUCTURED_LEVEL_DEFAULT
    assert server.requests == []


async def test_select_tools_over_grpc(
    planner: planner_pb2_grpc.PlannerServiceAsyncStub, server: ScriptedOpenAI
) -> None:
    tools = [planner_pb2.ToolSummary(name=f"t{i}", description=f"tool {i}") for i in range(15)]
    server.script(tool_call("select_tools", {"tools": ["t4", "t2"]}))
    reply = await planner.SelectTools(
        planner_pb2.SelectToolsRequest(query="q", tools=tools, pinned=["t14"])
    )
    assert list(reply.tool_names) == ["t2", "t4", "t14"] and not reply.fell_back
    server.script(tool_call("select_tools", {"tools": ["unknown"]}))
    reply = await planner.SelectTools(planner_pb2.SelectToolsRequest(query="q", tools=tools))
    assert len(reply.tool_names) == 15 and reply.fell_back


async def test_plan_over_grpc_and_its_errors(
    planner: planner_pb2_grpc.PlannerServiceAsyncStub, server: ScriptedOpenAI
) -> None:
    plan = {"steps": [{"task": "a"}, {"id": "s2", "task": "b", "dependencies": ["s1"]}]}
    server.script(tool_call("submit_plan", plan))
    reply = await planner.Plan(planner_pb2.PlanRequest(query="do a then b"))
    assert [(s.id, list(s.dependencies)) for s in reply.steps] == [("s1", []), ("s2", ["s1"])]
    assert list(reply.repairs) == ["steps[0] had no id; named it 's1'"]
    assert reply.level == planner_pb2.STRUCTURED_LEVEL_NATIVE_TOOL_CALL

    cyclic = {
        "steps": [
            {"id": "x", "task": "t", "dependencies": ["x2"]},
            {"id": "x2", "task": "u", "dependencies": ["x"]},
        ]
    }
    server.set_handler(
        lambda body: (
            tool_call("submit_plan", cyclic) if "tools" in body else text(json.dumps(cyclic))
        )
    )
    with pytest.raises(grpc.aio.AioRpcError) as failure:
        await planner.Plan(planner_pb2.PlanRequest(query="q"))
    assert failure.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "no valid plan" in str(failure.value.details())
    assert "cycle" in str(failure.value.details())
    with pytest.raises(grpc.aio.AioRpcError) as failure:
        await planner.Plan(planner_pb2.PlanRequest(query="  "))
    assert failure.value.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_the_plan_prompt_lists_the_models_a_step_may_run_on(
    planner: planner_pb2_grpc.PlannerServiceAsyncStub, server: ScriptedOpenAI
) -> None:
    plan = {
        "steps": [
            {"id": "s1", "task": "summarise the notes", "model_hint": "offline"},
            {"id": "s2", "task": "check the sums", "model_hint": "fast"},
            {"id": "s3", "task": "write it up", "model_hint": "gpt-9"},
        ]
    }
    server.script(tool_call("submit_plan", plan))

    reply = await planner.Plan(planner_pb2.PlanRequest(query="notes, sums, report"))

    system = server.requests[-1]["messages"][0]["content"]
    assert "model_hint" in system
    assert "- main (roles: general, fast, reasoning)" in system
    assert "- offline (roles: compact)" in system
    assert [s.model_hint for s in reply.steps] == ["offline", "fast", "gpt-9"]


async def test_analyze_plan_over_grpc(
    planner: planner_pb2_grpc.PlannerServiceAsyncStub, server: ScriptedOpenAI
) -> None:
    server.script(
        tool_call("submit_analysis", {"achieved": False, "confidence": 0.3, "reasoning": "gap"})
    )
    reply = await planner.AnalyzePlan(
        planner_pb2.AnalyzePlanRequest(
            query="q", results=[planner_pb2.StepResult(step_id="s1", task="t", result="r")]
        )
    )
    assert (reply.achieved, reply.confidence, reply.reasoning) == (False, 0.3, "gap")


async def test_route_over_grpc(
    planner: planner_pb2_grpc.PlannerServiceAsyncStub, server: ScriptedOpenAI
) -> None:
    fast = await planner.Route(planner_pb2.RouteRequest(query="hi"))
    assert fast.mode == common_pb2.MODE_SIMPLE and fast.fast_path
    server.script(tool_call("route_task", {"mode": "COMPLEX", "estimated_complexity": 0.8}))
    asked = await planner.Route(planner_pb2.RouteRequest(query="Organise a company offsite"))
    assert asked.mode == common_pb2.MODE_COMPLEX and not asked.fast_path
    assert asked.estimated_complexity == pytest.approx(0.8)
    with pytest.raises(grpc.aio.AioRpcError) as failure:
        await planner.Route(planner_pb2.RouteRequest(query=""))
    assert failure.value.code() == grpc.StatusCode.INVALID_ARGUMENT
