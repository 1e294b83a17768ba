"""DAG mode end to end in one process: real events, tools and planner services over gRPC,
the real `openai` client against a scripted OpenAI-compatible server for every model call."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from services.executor.dag.steps import StepLimits
from services.executor.ports import RunRequest
from shuttle.llm.openai_model import OpenAIModel
from shuttle.plans import PlanError, PlanStep, check_plan
from shuttle.v1 import common_pb2, events_pb2, executor_pb2
from tests.executor.conftest import TENANT, Backends, first, of_type, types_of
from tests.support.scripted_openai import Reply, error, text, tool_call
from tests.support.team_model import TeamModel, TimedScriptedOpenAI, plan, verdict

TEAM_FIELDS = {
    "TEAM_RECRUITED": {"team_size", "agents"},
    "TEAM_RETIRED": {"team_size", "duration_ms", "total_tokens", "reason"},
    "TEAM_STATUS": {
        "active_agents",
        "idle_agents",
        "tasks_completed",
        "tasks_remaining",
        "coordination_mode",
    },
    "DEPENDENCY_SATISFIED": {"subtask_id", "satisfied_dependencies", "can_proceed"},
    "MESSAGE_SENT": {"to", "content", "message_type"},
    "MESSAGE_RECEIVED": {"from", "content", "acknowledged"},
    "ROLE_ASSIGNED": {"role", "capabilities", "tools"},
    "PROGRESS": {"percentage", "current_step", "total_steps", "current_task"},
    "AGENT_STARTED": {"role", "subtask", "tools_available"},
    "AGENT_COMPLETED": {"result", "tokens_used", "cost_usd", "duration_ms"},
}


@pytest.fixture
def team() -> TeamModel:
    return TeamModel(plans=[])


def executor_model(server: TimedScriptedOpenAI) -> OpenAIModel:
    return OpenAIModel(server.base_url, "k", "scripted-model", 10.0, 0, retry_base_seconds=0.01)


async def run_complex(
    dag: Backends, server: TimedScriptedOpenAI, **kw: Any
) -> list[dict[str, Any]]:
    runs = dag.run_manager(executor_model(server), **kw)
    return await dag.run_to_end(runs, "Compare A and B", mode="COMPLEX")


def by_agent(events: list[dict[str, Any]], type_: str) -> dict[str, dict[str, Any]]:
    return {e["agent_id"]: e for e in of_type(events, type_)}


async def test_parallel_branches_run_concurrently_and_hand_off_to_the_join(
    dag: Backends, server: TimedScriptedOpenAI, team: TeamModel
) -> None:
    team.plans = [
        plan(("s1", "Research A", []), ("s2", "Research B", []), ("s3", "Compare", ["s1", "s2"]))
    ]
    server.latency_seconds = 0.5
    events = await run_complex(dag, server)

    s1, s2, s3 = (server.interval(k) for k in ("s1", "s2", "s3"))
    assert s1[0] < s2[1] and s2[0] < s1[1], "the independent steps' model calls overlap"
    assert s3[0] > max(s1[1], s2[1]), "the join starts after both of its dependencies"

    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    started = first(events, "WORKFLOW_STARTED")["payload"]
    assert started["mode"] == "COMPLEX" and "estimated_complexity" in started
    # The parallel steps' events interleave; each step's own, and everything else, do not.
    step_run = [
        "AGENT_STARTED",
        "AGENT_THINKING",
        "LLM_PROMPT",
        "LLM_OUTPUT",
        "AGENT_THINKING",
        "AGENT_COMPLETED",
    ]
    for agent in ("s1", "s2"):
        assert [e["type"] for e in events if e["agent_id"] == agent] == [
            "ROLE_ASSIGNED",
            *step_run,
            "MESSAGE_SENT",
        ]
    # TEAM_STATUS follows every change, and s1 and s2 may finish in one change or two.
    rest = [
        (e["agent_id"], e["type"])
        for e in events
        if e["agent_id"] not in ("s1", "s2") and e["type"] != "TEAM_STATUS"
    ]
    assert rest == [
        ("", "WORKFLOW_STARTED"),
        ("", "STATUS_UPDATE"),
        ("", "STATUS_UPDATE"),
        ("", "TEAM_RECRUITED"),
        ("s3", "ROLE_ASSIGNED"),
        ("", "PROGRESS"),
        ("", "PROGRESS"),
        ("s3", "DEPENDENCY_SATISFIED"),
        ("s3", "MESSAGE_RECEIVED"),
        ("s3", "MESSAGE_RECEIVED"),
        *[("s3", t) for t in step_run],
        ("", "PROGRESS"),
        ("reviewer", "AGENT_THINKING"),  # the round's review: its reasoning, confidence
        ("", "STATUS_UPDATE"),  # and verdict
        ("synthesizer", "LLM_PROMPT"),
        *[("synthesizer", "THREAD_MESSAGE_DELTA")] * 4,
        ("synthesizer", "THREAD_MESSAGE_COMPLETED"),
        ("synthesizer", "LLM_OUTPUT"),
        ("", "TEAM_RETIRED"),
        ("", "WORKFLOW_COMPLETED"),
        ("", "STREAM_END"),
    ]
    statuses = [e["payload"] for e in of_type(events, "TEAM_STATUS")]
    assert statuses[0] | {"coordination_mode": ""} == {
        "active_agents": 2,
        "idle_agents": 1,
        "tasks_completed": 0,
        "tasks_remaining": 3,
        "coordination_mode": "",
    }
    assert statuses[-1]["tasks_completed"] == 3 and statuses[-1]["tasks_remaining"] == 0
    assert types_of(events).index("TEAM_STATUS") < types_of(events).index("AGENT_STARTED")
    kinds = types_of(events)
    assert kinds.index("PROGRESS") > max(
        kinds.index("AGENT_COMPLETED"), kinds.index("AGENT_STARTED")
    )
    for type_, fields in TEAM_FIELDS.items():
        for event in of_type(events, type_):
            assert fields <= set(event["payload"]), (type_, event["payload"])

    recruited = first(events, "TEAM_RECRUITED")["payload"]
    assert recruited["team_size"] == 3
    assert [a["agent_id"] for a in recruited["agents"]] == ["s1", "s2", "s3"]
    assert set(by_agent(events, "ROLE_ASSIGNED")) == {"s1", "s2", "s3"}
    assert by_agent(events, "ROLE_ASSIGNED")["s3"]["payload"]["role"] == "integrator"
    assert set(by_agent(events, "AGENT_STARTED")) == {"s1", "s2", "s3"}
    assert by_agent(events, "AGENT_STARTED")["s1"]["payload"]["subtask"] == "Research A"
    completed = by_agent(events, "AGENT_COMPLETED")
    assert completed["s1"]["payload"]["result"] == "result of s1"

    satisfied = first(events, "DEPENDENCY_SATISFIED")
    assert satisfied["agent_id"] == "s3"
    assert satisfied["payload"]["satisfied_dependencies"] == ["s1", "s2"]
    s1_done = next(
        i for i, e in enumerate(events) if e["agent_id"] == "s1" and e["type"] == "AGENT_COMPLETED"
    )
    s2_done = next(
        i for i, e in enumerate(events) if e["agent_id"] == "s2" and e["type"] == "AGENT_COMPLETED"
    )
    assert kinds.index("DEPENDENCY_SATISFIED") > max(s1_done, s2_done)
    sent = [
        (e["agent_id"], e["payload"]["to"], e["payload"]["content"])
        for e in of_type(events, "MESSAGE_SENT")
    ]
    assert sent == [("s1", "s3", "result of s1"), ("s2", "s3", "result of s2")]
    received = [(e["agent_id"], e["payload"]["from"]) for e in of_type(events, "MESSAGE_RECEIVED")]
    assert received == [("s3", "s1"), ("s3", "s2")]
    assert "result of s1" in team.prompt_text("s3") and "result of s2" in team.prompt_text("s3")

    progress = [
        (p["payload"]["current_step"], p["payload"]["total_steps"])
        for p in of_type(events, "PROGRESS")
    ]
    assert progress == [(1, 3), (2, 3), (3, 3)]
    assert first(events, "TEAM_STATUS")["payload"]["coordination_mode"] == "parallel"
    assert first(events, "TEAM_RETIRED")["payload"]["reason"] == "task_completed"

    # Only the team's final answer is streamed; the steps' answers are hand-offs.
    assert {e["agent_id"] for e in of_type(events, "THREAD_MESSAGE_DELTA")} == {"synthesizer"}
    assert first(events, "THREAD_MESSAGE_COMPLETED")["payload"]["content"] == team.synthesis
    done = first(events, "WORKFLOW_COMPLETED")["payload"]
    assert done["result"] == team.synthesis and done["agents_used"] == 3
    assert done["total_tokens"] > 0
    assert "result of s3" in team.prompt_text("synthesis")


async def test_a_failed_step_fails_its_dependents_and_the_run_goes_on(
    dag: Backends, server: TimedScriptedOpenAI, team: TeamModel
) -> None:
    team.plans = [
        plan(("s1", "Fetch", []), ("s2", "Use the fetch", ["s1"]), ("s3", "Other work", []))
    ]
    team.steps = {"s1": [error(500, "provider down")]}
    events = await run_complex(dag, server)

    errors = by_agent(events, "ERROR_OCCURRED")
    assert errors["s1"]["payload"]["error_type"] == "LLM_ERROR"
    assert errors["s1"]["payload"]["fatal"] is False
    assert errors["s2"]["payload"]["error_type"] == "DEPENDENCY_FAILED"
    assert "s1" in errors["s2"]["payload"]["error_message"]
    assert set(by_agent(events, "AGENT_STARTED")) == {"s1", "s3"}
    assert set(by_agent(events, "AGENT_COMPLETED")) == {"s3"}
    assert "s2" not in team.calls
    assert "(FAILED)" in team.prompt_text("analysis")
    assert types_of(events)[-2:] == ["WORKFLOW_COMPLETED", "STREAM_END"]
    assert first(events, "WORKFLOW_COMPLETED")["payload"]["agents_used"] == 2


async def test_a_cyclic_plan_is_rejected_before_any_step_runs(
    dag: Backends, server: TimedScriptedOpenAI, team: TeamModel
) -> None:
    team.plans = [plan(("s1", "First", ["s2"]), ("s2", "Second", ["s1"]))]
    events = await run_complex(dag, server)

    fatal = first(events, "ERROR_OCCURRED")["payload"]
    assert fatal["fatal"] is True and fatal["error_type"] == "PLANNING_FAILED"
    assert "cycle" in fatal["error_message"]
    assert not {"TEAM_RECRUITED", "AGENT_STARTED"} & set(types_of(events))
    assert set(team.calls) == {"plan"}


def test_the_executor_checks_schedules_itself() -> None:
    with pytest.raises(PlanError, match="cycle"):
        check_plan(
            [PlanStep("a", "x", ("c",)), PlanStep("b", "y", ("a",)), PlanStep("c", "z", ("b",))]
        )
    with pytest.raises(PlanError, match="unknown step 'q'"):
        check_plan([PlanStep("a", "x", ("q",))])
    with pytest.raises(PlanError, match=r"'a' is used by steps\[0\] and steps\[1\]"):
        check_plan([PlanStep("a", "x"), PlanStep("a", "y")])
    check_plan([PlanStep("a", "x"), PlanStep("b", "y", ("a",))])


async def test_replans_until_the_analysis_is_confident(
    dag: Backends, server: TimedScriptedOpenAI, team: TeamModel
) -> None:
    team.plans = [plan(("s1", "Try", [])), plan(("s1", "Try harder", []))]
    team.verdicts = [verdict(False, 0.4), verdict(False, 0.85, "good enough")]
    events = await run_complex(dag, server)

    assert len(team.calls["plan"]) == 2 and len(team.calls["analysis"]) == 2
    assert "result of s1" in team.prompt_text("plan", 2)
    assert [e["payload"]["round"] for e in of_type(events, "TEAM_RECRUITED")] == [1, 2]
    assert set(by_agent(events, "AGENT_COMPLETED")) == {"s1", "r2-s1"}
    replanning = [
        e for e in of_type(events, "STATUS_UPDATE") if e["payload"].get("phase") == "replanning"
    ]
    assert len(replanning) == 1 and replanning[0]["payload"]["confidence"] == 0.4
    assert "good enough" in team.prompt_text("synthesis")
    assert len(of_type(events, "TEAM_RETIRED")) == 1


async def test_replanning_stops_after_three_rounds(
    dag: Backends, server: TimedScriptedOpenAI, team: TeamModel
) -> None:
    team.plans = [plan(("s1", "Try", []))]
    team.verdicts = [verdict(False, 0.2)]
    events = await run_complex(dag, server)

    assert len(team.calls["plan"]) == 3
    assert first(events, "TEAM_RETIRED")["payload"]["team_size"] == 3
    assert types_of(events)[-2:] == ["WORKFLOW_COMPLETED", "STREAM_END"]


async def test_cancel_mid_dag_stops_every_running_step(
    dag: Backends, server: TimedScriptedOpenAI, team: TeamModel
) -> None:
    waiting: list[str] = []
    arrived = threading.Event()

    def slow(body: dict[str, Any]) -> Reply:
        waiting.append("step")
        if len(waiting) == 2:
            arrived.set()
        return Reply(content="too late", delay=3)

    team.plans = [plan(("s1", "A", []), ("s2", "B", []), ("s3", "Join", ["s1", "s2"]))]
    team.steps = {"s1": [slow], "s2": [slow]}
    runs = dag.run_manager(executor_model(server))
    stub, _ = await dag.serve(runs)
    workflow_id = await runs.start(RunRequest("Compare A and B", TENANT, mode="COMPLEX"))
    await asyncio.to_thread(arrived.wait, 30)
    await stub.Control(
        executor_pb2.ControlRequest(
            workflow_id=workflow_id,
            tenant_id=TENANT,
            action=executor_pb2.CONTROL_ACTION_CANCEL,
            reason="changed my mind",
        )
    )
    events = await dag.read_log(workflow_id)

    kinds = types_of(events)
    assert kinds[-3:] == ["TEAM_RETIRED", "WORKFLOW_CANCELLED", "STREAM_END"]
    assert set(by_agent(events, "AGENT_STARTED")) == {"s1", "s2"}
    assert "AGENT_COMPLETED" not in kinds and "s3" not in team.calls
    assert first(events, "TEAM_RETIRED")["payload"]["reason"] == "cancelled"
    cancelled = first(events, "WORKFLOW_CANCELLED")["payload"]
    assert cancelled["reason"] == "changed my mind" and cancelled["checkpoint"] == "dag_step"


async def test_an_interrupt_reaches_the_running_step_and_the_next_replanning(
    dag: Backends, server: TimedScriptedOpenAI, team: TeamModel
) -> None:
    arrived, release = threading.Event(), threading.Event()

    def hold(body: dict[str, Any]) -> Reply:
        arrived.set()
        release.wait(30)
        return tool_call("calculator", {"expression": "2+2"}, "call_1")

    team.plans = [plan(("s1", "Compute", [])), plan(("s1", "Address the follow-up", []))]
    team.steps = {"s1": [hold, text("4")]}
    runs = dag.run_manager(executor_model(server))
    stub, _ = await dag.serve(runs)
    workflow_id = await runs.start(RunRequest("Compute things", TENANT, mode="COMPLEX"))
    await asyncio.to_thread(arrived.wait, 30)
    await stub.Interrupt(
        executor_pb2.InterruptRequest(
            workflow_id=workflow_id, tenant_id=TENANT, message="also in euros please"
        )
    )
    release.set()
    events = await dag.read_log(workflow_id)

    assert "[USER INTERRUPT]" in team.prompt_text("s1", 2)
    assert "also in euros please" in team.prompt_text("s1", 2)
    assert len(team.calls["plan"]) == 2
    assert "also in euros please" in team.prompt_text("plan", 2)
    assert "also in euros please" in team.prompt_text("r2-s1")
    assert "also in euros please" in team.prompt_text("synthesis")
    assert types_of(events)[-2:] == ["WORKFLOW_COMPLETED", "STREAM_END"]


async def test_a_step_that_overruns_its_time_limit_fails(
    dag: Backends, server: TimedScriptedOpenAI, team: TeamModel
) -> None:
    team.plans = [plan(("s1", "Slow", []), ("s2", "After", ["s1"]))]
    team.steps = {"s1": [Reply(content="late", delay=2)]}
    events = await run_complex(dag, server, step_limits=StepLimits(timeout_seconds=0.5))

    errors = by_agent(events, "ERROR_OCCURRED")
    assert errors["s1"]["payload"]["error_type"] == "TIMEOUT"
    assert errors["s2"]["payload"]["error_type"] == "DEPENDENCY_FAILED"
    assert types_of(events)[-2:] == ["WORKFLOW_COMPLETED", "STREAM_END"]


async def test_pause_holds_every_step_of_the_team_until_resume(
    dag: Backends, server: TimedScriptedOpenAI, team: TeamModel
) -> None:
    arrived: list[str] = []
    both = threading.Event()

    def first_call(body: dict[str, Any]) -> Reply:
        arrived.append("step")
        if len(arrived) == 2:
            both.set()
        return Reply(
            content="calculating",
            tool_calls=[("c1", "calculator", {"expression": "1+1"})],
            delay=0.5,
        )

    team.plans = [plan(("s1", "A", []), ("s2", "B", []), ("s3", "Join", ["s1", "s2"]))]
    team.steps = {"s1": [first_call], "s2": [first_call]}
    runs = dag.run_manager(executor_model(server))
    stub, _ = await dag.serve(runs)
    workflow_id = await runs.start(RunRequest("Compare A and B", TENANT, mode="COMPLEX"))
    await asyncio.to_thread(both.wait, 30)

    def control(action: int) -> executor_pb2.ControlRequest:
        return executor_pb2.ControlRequest(
            workflow_id=workflow_id,
            tenant_id=TENANT,
            action=action,  # type: ignore[arg-type]
        )

    await stub.Control(control(executor_pb2.CONTROL_ACTION_PAUSE))
    await wait_for(dag, workflow_id, "WORKFLOW_PAUSED")
    held = {k for k, _, _ in server.intervals}
    await stub.Control(control(executor_pb2.CONTROL_ACTION_RESUME))
    events = await dag.read_log(workflow_id)

    kinds = types_of(events)
    assert kinds.count("WORKFLOW_PAUSED") == 1, "one pause for the whole team"
    assert "s3" not in held, "no step started while paused"
    paused = kinds.index("WORKFLOW_PAUSED")
    resumed = kinds.index("WORKFLOW_RESUMED")
    assert not [e for e in events[paused:resumed] if e["type"] in ("TOOL_INVOKED", "AGENT_STARTED")]
    assert set(by_agent(events, "AGENT_COMPLETED")) == {"s1", "s2", "s3"}
    assert kinds[-2:] == ["WORKFLOW_COMPLETED", "STREAM_END"]


async def wait_for(dag: Backends, workflow_id: str, type_: str) -> None:
    stream = dag.events.Stream(
        events_pb2.StreamRequest(workflow_id=workflow_id, tenant_id=TENANT, from_seq=1)
    )
    async for event in stream:
        if event.type == common_pb2.EventType.Value(f"EVENT_TYPE_{type_}"):
            stream.cancel()
            return
    raise AssertionError(f"the log ended without {type_}")
