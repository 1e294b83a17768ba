"""Approvals inside DAG steps: a step's gated tool call waits for an operator's decision, made
through ToolService.DecideApproval, while the other steps of the team go on. Real events,
tools (with an approval hook) and planner services; the scripted OpenAI-compatible server."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from services.executor.ports import RunRequest
from shuttle.llm.openai_model import OpenAIModel
from shuttle.v1 import tools_pb2, tools_pb2_grpc
from tests.executor.conftest import TENANT, Backends, first, of_type, running_backends, types_of
from tests.support.scripted_openai import text, tool_call
from tests.support.team_model import TeamModel, TimedScriptedOpenAI, plan
from tests.tools.approval_support import HOOKS_GATING_CALCULATOR


@pytest.fixture
def team() -> TeamModel:
    return TeamModel(
        plans=[plan(("s1", "Compute 6*7", []), ("s2", "Research B", []))],
        steps={"s1": [tool_call("calculator", {"expression": "6*7"}), text("It is 42.")]},
    )


@pytest.fixture
async def dag(tmp_path: Path, server: TimedScriptedOpenAI) -> AsyncIterator[Backends]:
    async with running_backends(
        tmp_path, server.base_url, tool_hooks=HOOKS_GATING_CALCULATOR
    ) as started:
        yield started


def of_agent(events: list[dict[str, Any]], type_: str, agent_id: str) -> dict[str, Any]:
    return next(e for e in events if e["type"] == type_ and e["agent_id"] == agent_id)


async def decide_while_the_team_works(
    dag: Backends, server: TimedScriptedOpenAI, decision: str, comment: str = ""
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Run the team; once s1 waits for approval and s2 has finished meanwhile, decide.
    The approval request and the whole log."""
    model = OpenAIModel(server.base_url, "k", "scripted-model", 60.0, 0, retry_base_seconds=0.01)
    runs = dag.run_manager(model)
    workflow_id = await runs.start(RunRequest("Compute and research", TENANT, mode="COMPLEX"))
    requested = await dag.first_event(workflow_id, lambda e: e["type"] == "APPROVAL_REQUESTED")
    await dag.first_event(
        workflow_id, lambda e: e["type"] == "AGENT_COMPLETED" and e["agent_id"] == "s2"
    )
    tools = tools_pb2_grpc.ToolServiceStub(dag.channels[1])
    decided = await tools.DecideApproval(
        tools_pb2.DecideApprovalRequest(
            approval_id=requested["payload"]["approval_id"],
            tenant_id=TENANT,
            decision=decision,
            comment=comment,
            decided_by="operator",
        )
    )
    assert decided.status == decision
    return requested, await dag.read_log(workflow_id)


async def test_an_approved_call_lets_its_step_finish_and_the_other_step_was_not_blocked(
    dag: Backends, server: TimedScriptedOpenAI, team: TeamModel
) -> None:
    requested, events = await decide_while_the_team_works(dag, server, "approved")

    assert requested["agent_id"] == "s1", "the request names the step's agent"
    assert requested["payload"]["tool_name"] == "calculator"
    assert (
        of_agent(events, "WAITING", "s1")["payload"]["waiting_for"]
        == (requested["payload"]["approval_id"])
    )
    decision = first(events, "APPROVAL_DECISION")
    assert decision["payload"]["decision"] == "approved"
    assert of_agent(events, "AGENT_COMPLETED", "s2")["seq"] < decision["seq"]

    observation = of_agent(events, "TOOL_OBSERVATION", "s1")
    assert observation["seq"] > decision["seq"]
    assert observation["payload"]["result"] == "42" and not observation["payload"]["blocked"]
    assert "42" in team.prompt_text("s1", 2)
    assert of_agent(events, "AGENT_COMPLETED", "s1")["payload"]["result"] == "It is 42."
    assert "It is 42." in team.prompt_text("synthesis")
    assert first(events, "WORKFLOW_COMPLETED")["payload"]["agents_used"] == 2
    assert types_of(events)[-2:] == ["WORKFLOW_COMPLETED", "STREAM_END"]


async def test_a_denied_call_is_observed_by_its_step_and_the_run_goes_on(
    dag: Backends, server: TimedScriptedOpenAI, team: TeamModel
) -> None:
    requested, events = await decide_while_the_team_works(dag, server, "denied", "not today")

    assert requested["agent_id"] == "s1"
    decision = first(events, "APPROVAL_DECISION")
    assert decision["payload"]["decision"] == "denied"
    assert of_agent(events, "AGENT_COMPLETED", "s2")["seq"] < decision["seq"]

    observation = of_agent(events, "TOOL_OBSERVATION", "s1")["payload"]
    assert observation["blocked"] is True
    assert "denied" in observation["result"] and "not today" in observation["result"]
    assert "denied" in team.prompt_text("s1", 2), "the step's next call sees the denial"
    assert of_agent(events, "AGENT_COMPLETED", "s1")["payload"]["result"] == "It is 42."
    assert not [e for e in of_type(events, "ERROR_OCCURRED") if e["payload"]["fatal"]]
    assert first(events, "TEAM_RETIRED")["payload"]["reason"] == "task_completed"
    assert types_of(events)[-2:] == ["WORKFLOW_COMPLETED", "STREAM_END"]
