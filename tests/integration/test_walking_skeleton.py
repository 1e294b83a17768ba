"""A task goes in at the gateway and comes out as an ordered SSE stream across five processes."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from cli.launcher import LaunchError, Supervisor
from shuttle.v1 import common_pb2, planner_pb2, planner_pb2_grpc
from tests.support.models import arithmetic_model
from tests.support.scripted_openai import ScriptedOpenAI
from tests.support.sse import Frame, read_stream
from tests.support.stack import Stack, settings_on_free_ports, start_stack

pytestmark = pytest.mark.integration

# The order the issue promises; other events (e.g. LLM_OUTPUT of the tool loop) may sit between.
EXPECTED_ORDER = [
    "WORKFLOW_STARTED",
    "AGENT_STARTED",
    "AGENT_THINKING",
    "TOOL_INVOKED",
    "TOOL_OBSERVATION",
    "THREAD_MESSAGE_DELTA",
    "THREAD_MESSAGE_COMPLETED",
    "LLM_OUTPUT",
    "AGENT_COMPLETED",
    "WORKFLOW_COMPLETED",
    "STREAM_END",
]


@pytest.fixture(scope="module")
def model() -> Iterator[ScriptedOpenAI]:
    server = ScriptedOpenAI(handler=arithmetic_model).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def running(model: ScriptedOpenAI, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    started = start_stack(tmp_path_factory.mktemp("stack"), model.base_url)
    yield started
    started.stop()


@pytest.fixture(scope="module")
def stack(running: Stack) -> str:
    return running.gateway


def submit(gateway: str, query: str) -> dict[str, Any]:
    response = httpx.post(f"{gateway}/api/v1/tasks", json={"query": query}, timeout=30)
    assert response.status_code == 201, response.text
    created: dict[str, Any] = response.json()
    return created


def stream(gateway: str, workflow_id: str, headers: dict[str, str] | None = None) -> list[Frame]:
    status, frames = read_stream(
        gateway, f"/api/v1/stream/sse?workflow_id={workflow_id}", headers=headers
    )
    assert status == 200
    return frames


def assert_in_order(types: list[str], expected: list[str]) -> None:
    position = 0
    for wanted in expected:
        assert wanted in types[position:], f"{wanted} missing after index {position}: {types}"
        position = types.index(wanted, position) + 1


def test_task_streams_every_step_in_order_then_closes(stack: str, model: ScriptedOpenAI) -> None:
    created = submit(stack, "What is 12*7?")
    assert created["task_id"] == created["workflow_id"]
    assert created["stream_url"] == f"/api/v1/stream/sse?workflow_id={created['workflow_id']}"

    frames = stream(stack, created["workflow_id"])

    types = [f.event for f in frames]
    assert_in_order([t or "" for t in types], EXPECTED_ORDER)
    assert types[-1] == "STREAM_END"
    seqs = [f.envelope["seq"] for f in frames]
    assert seqs == list(range(1, len(frames) + 1))
    assert [f.id for f in frames] == [str(s) for s in seqs]
    assert frames[0].retry is not None
    for frame in frames:
        envelope = frame.envelope
        assert envelope["workflow_id"] == created["workflow_id"]
        assert envelope["type"] == frame.event
        assert envelope["stream_id"] == f"{envelope['seq']}-0"
        assert envelope["timestamp"].endswith("Z")

    by_type = {f.event: f.envelope for f in frames}
    assert by_type["TOOL_INVOKED"]["payload"]["tool_args"] == {"expression": "12*7"}
    assert by_type["TOOL_OBSERVATION"]["payload"]["result"] == "84"
    deltas = "".join(
        f.envelope["payload"]["delta"] for f in frames if f.event == "THREAD_MESSAGE_DELTA"
    )
    answer = by_type["THREAD_MESSAGE_COMPLETED"]["payload"]["content"]
    assert answer == deltas == "The answer is 84."
    assert by_type["WORKFLOW_COMPLETED"]["payload"]["result"] == answer
    assert by_type["WORKFLOW_COMPLETED"]["payload"]["tools_invoked"] == 1

    # The model saw the tool result right after its own tool call (native function calling).
    second_call = next(r for r in model.requests if any(m["role"] == "tool" for m in r["messages"]))
    roles = [m["role"] for m in second_call["messages"]]
    assert roles[-2:] == ["assistant", "tool"]
    assert second_call["messages"][-1] == {
        "role": "tool",
        "tool_call_id": "agent-main.1.0",
        "content": "84",
    }

    task = httpx.get(f"{stack}/api/v1/tasks/{created['workflow_id']}", timeout=10).json()
    assert task["status"] == "completed"
    assert task["result"] == "The answer is 84."
    assert task["last_seq"] == len(frames)


def test_a_late_subscriber_gets_the_whole_stream_and_can_resume(stack: str) -> None:
    workflow_id = submit(stack, "What is 6*7?")["workflow_id"]
    first = stream(stack, workflow_id)
    late = stream(stack, workflow_id)
    assert [f.data for f in late] == [f.data for f in first]

    resumed = stream(stack, workflow_id, headers={"Last-Event-ID": "3"})
    assert [f.envelope["seq"] for f in resumed] == list(range(4, len(first) + 1))


def test_concurrent_tasks_each_get_their_own_gap_free_log(stack: str) -> None:
    queries = ["What is 2+3?", "What is 9*9?", "What is 100-1?"]
    with ThreadPoolExecutor(len(queries)) as pool:
        ids = list(pool.map(lambda q: submit(stack, q)["workflow_id"], queries))
        logs = list(pool.map(lambda wf: stream(stack, wf), ids))
    assert len(set(ids)) == len(ids)
    for workflow_id, frames, expected in zip(ids, logs, ["5", "81", "99"], strict=True):
        assert {f.envelope["workflow_id"] for f in frames} == {workflow_id}
        assert [f.envelope["seq"] for f in frames] == list(range(1, len(frames) + 1))
        completed = next(f for f in frames if f.event == "THREAD_MESSAGE_COMPLETED")
        assert completed.envelope["payload"]["content"] == f"The answer is {expected}."


def test_bad_requests_get_json_errors(stack: str) -> None:
    missing = httpx.get(f"{stack}/api/v1/tasks/wf-does-not-exist", timeout=10)
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "not_found"

    blank = httpx.post(f"{stack}/api/v1/tasks", json={"query": "  "}, timeout=10)
    assert blank.status_code == 400
    assert "query" in blank.json()["error"]["message"]

    not_json = httpx.post(
        f"{stack}/api/v1/tasks", content=b"{oops", headers={"content-type": "application/json"}
    )
    assert not_json.status_code == 400

    status, _ = read_stream(stack, "/api/v1/stream/sse?workflow_id=wf-nope")
    assert status == 404


def test_every_grpc_port_answers_health_and_reflection(running: Stack) -> None:
    expected = {
        "events": "shuttle.v1.EventService",
        "tools": "shuttle.v1.ToolService",
        "planner": "shuttle.v1.PlannerService",
        "executor": "shuttle.v1.ExecutorService",
    }
    for name in running.grpc_ports:
        with running.blocking_channel(name) as channel:
            health = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=expected[name]), timeout=5
            )
            assert health.status == health_pb2.HealthCheckResponse.SERVING
            replies = reflection_pb2_grpc.ServerReflectionStub(channel).ServerReflectionInfo(
                iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=5
            )
            names = {s.name for r in replies for s in r.list_services_response.service}
            assert expected[name] in names
            assert "grpc.health.v1.Health" in names


def test_the_planner_process_routes_and_rejects_bad_input(running: Stack) -> None:
    with running.blocking_channel("planner") as channel:
        planner = planner_pb2_grpc.PlannerServiceStub(channel)
        decision = planner.Route(planner_pb2.RouteRequest(query="hello"), timeout=5)
        assert decision.mode == common_pb2.MODE_SIMPLE and decision.fast_path
        with pytest.raises(grpc.RpcError) as failure:
            planner.Route(planner_pb2.RouteRequest(query=" "), timeout=5)
    assert failure.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "query must not be empty" in (failure.value.details() or "")


def test_the_demo_model_answers_arithmetic_offline(tmp_path: Path) -> None:
    demo = start_stack(tmp_path)
    gateway = demo.gateway
    try:
        frames = stream(gateway, submit(gateway, "What is 12*7?")["workflow_id"])
        answer = next(f for f in frames if f.event == "THREAD_MESSAGE_COMPLETED")
        content = answer.envelope["payload"]["content"]
        assert "84" in content and "[demo model]" in content
        assert frames[-1].event == "STREAM_END"

        frames = stream(gateway, submit(gateway, "Who won the 1998 World Cup?")["workflow_id"])
        answer = next(f for f in frames if f.event == "THREAD_MESSAGE_COMPLETED")
        assert "can only do arithmetic" in answer.envelope["payload"]["content"]
        assert "TOOL_INVOKED" not in [f.event for f in frames]
    finally:
        exit_codes = demo.stop()
    # SIGTERM is a graceful stop: every process exits cleanly, none is killed.
    assert exit_codes == dict.fromkeys(exit_codes, 0)


def test_a_busy_port_is_reported_with_the_variable_to_change(tmp_path: Path) -> None:
    settings = settings_on_free_ports(tmp_path)
    planner = settings.planner_port
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", planner))
        squatter.listen()
        with pytest.raises(LaunchError) as failure:
            Supervisor(settings, tmp_path / "logs").start()
    message = str(failure.value)
    assert f"port {planner} (planner)" in message
    assert "SHUTTLE_PLANNER_PORT" in message
