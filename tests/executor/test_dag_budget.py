"""DAG mode's token budget is the team's: one ledger that planning, analysis and every running
step charge, checked before each model call. Real events, tools and planner services; every
model call answered by the scripted OpenAI-compatible server, each reporting the same usage."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from services.executor.ports import RunRequest
from shuttle.llm.openai_model import OpenAIModel
from shuttle.v1 import common_pb2
from tests.executor.conftest import TENANT, Backends, first, of_type, types_of
from tests.support.scripted_openai import text, tool_call
from tests.support.team_model import TeamModel, TimedScriptedOpenAI, plan, verdict

CALL_TOKENS = 1_000
"""What every model call of these tests reports as its usage."""
CALCULATE = tool_call("calculator", {"expression": "6*7"})


@pytest.fixture
def team() -> TeamModel:
    return TeamModel(plans=[], tokens_per_call=CALL_TOKENS)


def patient_model(server: TimedScriptedOpenAI) -> OpenAIModel:
    """The executor's model, willing to wait for replies the test holds back."""
    return OpenAIModel(server.base_url, "k", "scripted-model", 120.0, 0, retry_base_seconds=0.01)


def is_budget_exceeded(event: dict[str, Any]) -> bool:
    error_type: str = event["payload"].get("error_type", "")
    return event["type"] == "ERROR_OCCURRED" and error_type == "BUDGET_EXCEEDED"


def budget_errors(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in events if is_budget_exceeded(e)]


async def test_once_the_team_budget_is_spent_every_running_step_stops_at_its_next_call(
    dag: Backends, server: TimedScriptedOpenAI, team: TeamModel
) -> None:
    budget = 2_500
    team.plans = [
        plan(("s1", "Research A", []), ("s2", "Research B", []), ("s3", "Compare", ["s1", "s2"]))
    ]
    team.verdicts = [verdict(False, 0.1)]  # a round that would be replanned, budget permitting
    team.steps = {"s1": [CALCULATE, CALCULATE, text("A")], "s2": [CALCULATE, text("B")]}
    # s1 answers only once s2's first call is in flight, and s2's first call is answered only
    # once s1 has spent the budget: s2 learns of it on its return, at its next checkpoint.
    server.hold("s1", until=server.arrival("s2"))
    s2_released = threading.Event()
    server.hold("s2", until=s2_released)
    runs = dag.run_manager(patient_model(server))
    workflow_id = await runs.start(
        RunRequest("Compare A and B", TENANT, mode="COMPLEX", budget_tokens=budget)
    )
    exceeded = await dag.first_event(workflow_id, is_budget_exceeded)
    s2_released.set()
    events = await dag.read_log(workflow_id)

    # Each running step stopped at its next model call; s2's reply was in flight.
    assert {k: len(v) for k, v in team.calls.items()} == {"plan": 1, "s1": 2, "s2": 1}
    tools_run = [e["agent_id"] for e in of_type(events, "TOOL_INVOKED")]
    assert tools_run == ["s1"], "neither step ran the tool calls of its last reply"
    in_flight = 2 * CALL_TOKENS  # s1's second call and s2's first when the budget ran out
    done = first(events, "WORKFLOW_COMPLETED")["payload"]
    assert done["total_tokens"] == 4 * CALL_TOKENS <= budget + in_flight
    retired = first(events, "TEAM_RETIRED")["payload"]
    assert retired["reason"] == "budget_exceeded"
    assert retired["total_tokens"] == done["total_tokens"]

    # plan (1,000), s1's first call (2,000: the warning), s1's second call (3,000: spent).
    assert exceeded["agent_id"] == "s1"
    assert exceeded["payload"]["tokens_used"] == 3 * CALL_TOKENS
    assert exceeded["payload"]["tokens_budget"] == budget
    assert exceeded["payload"]["fatal"] is False
    assert budget_errors(events) == [exceeded], "BUDGET_EXCEEDED once for the whole team"
    (warning,) = of_type(events, "BUDGET_THRESHOLD")
    assert warning["payload"]["tokens_used"] == 2 * CALL_TOKENS
    assert warning["payload"]["tokens_budget"] == budget
    assert warning["seq"] < exceeded["seq"]

    # The dependent never started and no further round was planned.
    assert {e["agent_id"] for e in of_type(events, "AGENT_STARTED")} == {"s1", "s2"}
    skipped = [e for e in of_type(events, "ERROR_OCCURRED") if e["agent_id"] == "s3"]
    assert [e["payload"]["error_type"] for e in skipped] == ["STEP_SKIPPED"]
    assert "token budget exhausted" in skipped[0]["payload"]["error_message"]
    assert len(of_type(events, "TEAM_RECRUITED")) == 1
    assert not [
        e for e in of_type(events, "STATUS_UPDATE") if e["payload"].get("phase") == "replanning"
    ]

    # The run ends with an answer made from what the steps had, without another model call.
    (answer,) = of_type(events, "THREAD_MESSAGE_COMPLETED")
    content = answer["payload"]["content"]
    assert answer["agent_id"] == "synthesizer" and not of_type(events, "THREAD_MESSAGE_DELTA")
    assert f"token budget of {budget} tokens was used up" in content
    assert "Step s1 (stopped by the budget)" in content and "42" in content
    assert "Step s3 (not run)" in content
    assert done["result"] == content
    assert done["agents_used"] == 2
    assert types_of(events)[-2:] == ["WORKFLOW_COMPLETED", "STREAM_END"]
    workflow = await dag.workflow(workflow_id)
    assert workflow.status == common_pb2.WORKFLOW_STATUS_COMPLETED


async def test_a_budget_spent_by_the_analysis_plans_no_further_round(
    dag: Backends, server: TimedScriptedOpenAI, team: TeamModel
) -> None:
    budget = 3 * CALL_TOKENS
    team.plans = [plan(("s1", "Try", []))]
    team.verdicts = [verdict(False, 0.2, answer="a partial draft")]
    runs = dag.run_manager(patient_model(server))
    events = await dag.run_to_end(runs, "Try things", mode="COMPLEX", budget_tokens=budget)

    # plan, s1, analysis: the analysis spends the last of it, and the round stands.
    assert {k: len(v) for k, v in team.calls.items()} == {"plan": 1, "s1": 1, "analysis": 1}
    (exceeded,) = budget_errors(events)
    assert exceeded["agent_id"] == "" and exceeded["payload"]["tokens_used"] == budget
    assert len(of_type(events, "BUDGET_THRESHOLD")) == 1
    assert [e["payload"]["round"] for e in of_type(events, "TEAM_RECRUITED")] == [1]
    content = first(events, "THREAD_MESSAGE_COMPLETED")["payload"]["content"]
    assert "a partial draft" in content and "Step s1 (done)" in content
    assert "result of s1" in content
    assert first(events, "TEAM_RETIRED")["payload"]["reason"] == "budget_exceeded"
    assert types_of(events)[-2:] == ["WORKFLOW_COMPLETED", "STREAM_END"]


async def test_a_budget_with_room_to_spare_changes_nothing(
    dag: Backends, server: TimedScriptedOpenAI, team: TeamModel
) -> None:
    team.plans = [plan(("s1", "A", []), ("s2", "B", []), ("s3", "Join", ["s1", "s2"]))]
    runs = dag.run_manager(patient_model(server))
    events = await dag.run_to_end(runs, "Compare", mode="COMPLEX", budget_tokens=100_000)

    assert not budget_errors(events) and not of_type(events, "BUDGET_THRESHOLD")
    assert {e["agent_id"] for e in of_type(events, "AGENT_COMPLETED")} == {"s1", "s2", "s3"}
    assert first(events, "TEAM_RETIRED")["payload"]["reason"] == "task_completed"
    assert first(events, "WORKFLOW_COMPLETED")["payload"]["result"] == team.synthesis
