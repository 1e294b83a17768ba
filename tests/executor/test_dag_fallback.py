"""A run the router sent COMPLEX whose first plan is not worth a team (none could be had, or
its one step restates the task) goes on as STANDARD, on the live path and after a takeover;
a mode the user forced keeps its team. A team's synthesis that gives its prompt back is not
the answer either."""

from __future__ import annotations

from typing import Any

import pytest

from services.executor.adapters.events import GrpcRunLeases
from services.executor.dag.synthesis import TEAM_SYNTHESIS_PROMPT
from services.executor.lease import Leasing
from services.executor.ports import RunRequest
from services.executor.runs import RunManager
from shuttle.llm.openai_model import OpenAIModel
from tests.executor.conftest import TENANT, Backends, first, of_type, types_of
from tests.executor.test_takeover import LEASE_SECONDS, POLL_SECONDS
from tests.executor.test_takeover_team import handed_over_mid_answer
from tests.support.scripted_openai import text, tool_call
from tests.support.team_model import TeamModel, TimedScriptedOpenAI, plan, verdict

QUERY = "Name the capital of France"
ROUTED_COMPLEX = tool_call("route_task", {"mode": "COMPLEX", "estimated_complexity": 0.9})
TOKENS_PER_CALL = 40


@pytest.fixture
def team() -> TeamModel:
    """The router says COMPLEX; the agent (or a step) answers at once."""
    return TeamModel(
        plans=[plan(("s1", "Name the capital city of France", []))],
        steps={"other": [ROUTED_COMPLEX, text("Paris.")], "s1": [text("Paris.")]},
        synthesis="The capital of France is Paris.",
        tokens_per_call=TOKENS_PER_CALL,
    )


def runs_on(dag: Backends, server: TimedScriptedOpenAI, **kw: Any) -> RunManager:
    llm = OpenAIModel(server.base_url, "k", "scripted-model", 30.0, 0)
    return dag.run_manager(
        llm, router=dag.planner, completion_check=False, reflection_interval=0, **kw
    )


def fell_back(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in of_type(events, "STATUS_UPDATE") if e["payload"].get("kind") == "fell_back"]


async def test_a_plan_that_restates_the_task_runs_as_standard(
    dag: Backends, server: TimedScriptedOpenAI, team: TeamModel
) -> None:
    events = await dag.run_to_end(runs_on(dag, server), QUERY)

    assert first(events, "WORKFLOW_STARTED")["payload"]["mode"] == "COMPLEX"
    (switch,) = fell_back(events)
    assert switch["payload"]["from_mode"] == "COMPLEX" and switch["payload"]["mode"] == "STANDARD"
    assert "restates" in switch["payload"]["reason"]
    assert switch["payload"]["usage"]["total_tokens"] == TOKENS_PER_CALL, "the plan's cost"
    assert not {"TEAM_RECRUITED", "TEAM_RETIRED"} & set(types_of(events))
    assert "s1" not in team.calls, "no step ran"
    (agent,) = of_type(events, "AGENT_STARTED")
    assert agent["seq"] > switch["seq"]
    done = first(events, "WORKFLOW_COMPLETED")["payload"]
    assert done["result"] == team.synthesis and done["agents_used"] == 1
    # Routing, the plan and the agent's calls are all in the run's total.
    routing = first(events, "WORKFLOW_STARTED")["payload"]["routing"]["usage"]["total_tokens"]
    outputs = sum(e["payload"]["usage"]["total_tokens"] for e in of_type(events, "LLM_OUTPUT"))
    assert done["total_tokens"] == routing + TOKENS_PER_CALL + outputs


async def test_a_plan_whose_first_step_is_the_whole_task_runs_as_standard(
    dag: Backends, server: TimedScriptedOpenAI, team: TeamModel
) -> None:
    # Gemma 3 270M's plan for the question.
    team.plans = [
        plan(("s1", "Name the Capital of France", []), ("s2", "The Capital of Italy", []))
    ]
    events = await dag.run_to_end(runs_on(dag, server), QUERY)

    (switch,) = fell_back(events)
    assert switch["payload"]["reason"] == (
        "step 's1' restates the whole task, so the plan does not divide it"
    )
    assert "TEAM_RECRUITED" not in types_of(events)


async def test_no_usable_plan_runs_as_standard(
    dag: Backends, server: TimedScriptedOpenAI, team: TeamModel
) -> None:
    team.plans = [plan(("s1", '":{', []))]  # every level of the plan call gets the same
    events = await dag.run_to_end(runs_on(dag, server), QUERY)

    (switch,) = fell_back(events)
    assert "no usable plan" in switch["payload"]["reason"]
    assert "is not a task" in switch["payload"]["reason"]
    assert not any(e["payload"].get("fatal") for e in of_type(events, "ERROR_OCCURRED"))
    assert first(events, "WORKFLOW_COMPLETED")["payload"]["result"] == team.synthesis
    assert len(team.calls["plan"]) > 1, "the planner tried again before giving up"


async def test_a_forced_complex_keeps_its_team(
    dag: Backends, server: TimedScriptedOpenAI, team: TeamModel
) -> None:
    events = await dag.run_to_end(runs_on(dag, server), QUERY, mode="COMPLEX")

    assert not fell_back(events)
    assert "TEAM_RECRUITED" in types_of(events)
    assert [e["agent_id"] for e in of_type(events, "AGENT_STARTED")] == ["s1"]


async def test_a_plan_of_real_parts_keeps_its_team(
    dag: Backends, server: TimedScriptedOpenAI, team: TeamModel
) -> None:
    team.plans = [
        plan(
            ("s1", "Research venues", []),
            ("s2", "Draft the agenda", []),
            ("s3", "Organise a company offsite from s1 and s2", ["s1", "s2"]),
        )
    ]
    team.steps.update(s2=[text("B.")], s3=[text("C.")])
    events = await dag.run_to_end(runs_on(dag, server), "Organise a company offsite")

    assert not fell_back(events), "the join restates the task but starts from the others"
    assert sorted(e["agent_id"] for e in of_type(events, "AGENT_STARTED")) == ["s1", "s2", "s3"]


async def test_a_run_taken_over_after_falling_back_stays_standard(
    dag: Backends, server: TimedScriptedOpenAI, team: TeamModel
) -> None:
    def replica(owner: str) -> RunManager:
        leases = GrpcRunLeases(dag.client)
        leasing = Leasing(leases, owner, LEASE_SECONDS, takeover_poll_seconds=POLL_SECONDS)
        return runs_on(dag, server, leasing=leasing)

    a, b = replica("replica-a"), replica("replica-b")
    events = await handed_over_mid_answer(dag, server, a, b, RunRequest(QUERY, TENANT))

    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert types_of(events)[-2:] == ["WORKFLOW_COMPLETED", "STREAM_END"]
    assert len(fell_back(events)) == 1 and len(team.calls["plan"]) == 1, "not planned again"
    assert len(of_type(events, "AGENT_STARTED")) == 1 and "TEAM_RECRUITED" not in types_of(events)
    restarted = [e for e in of_type(events, "STATUS_UPDATE") if e["payload"].get("kind")]
    assert [e["payload"]["kind"] for e in restarted] == ["fell_back", "answer_restarted"]
    done = first(events, "WORKFLOW_COMPLETED")["payload"]
    assert done["result"] == team.synthesis
    assert (
        done["total_tokens"]
        >= first(events, "WORKFLOW_STARTED")["payload"]["routing"]["usage"]["total_tokens"]
        + TOKENS_PER_CALL
    )


@pytest.mark.parametrize("synthesis", ["", TEAM_SYNTHESIS_PROMPT[:160]])
async def test_a_team_synthesis_that_says_nothing_or_echoes_its_prompt_keeps_the_draft(
    dag: Backends, server: TimedScriptedOpenAI, team: TeamModel, synthesis: str
) -> None:
    team.plans = [plan(("s1", "Research A", []), ("s2", "Research B", []))]
    team.steps["s2"] = [text("B.")]
    team.verdicts = [verdict(True, 0.95, answer="A and B, from the review.")]
    team.synthesis = synthesis
    events = await dag.run_to_end(runs_on(dag, server), QUERY, mode="COMPLEX")

    done = first(events, "WORKFLOW_COMPLETED")["payload"]
    assert done["result"] == "A and B, from the review."
    assert first(events, "THREAD_MESSAGE_COMPLETED")["payload"]["content"] == done["result"]


async def test_without_a_draft_an_echoed_team_synthesis_leaves_the_steps_results(
    dag: Backends, server: TimedScriptedOpenAI, team: TeamModel
) -> None:
    team.plans = [plan(("s1", "Research A", []), ("s2", "Research B", []))]
    team.steps.update(s1=[text("A is 1.")], s2=[text("B is 2.")])
    team.verdicts = [verdict(True, 0.95, answer="")]
    team.synthesis = TEAM_SYNTHESIS_PROMPT
    events = await dag.run_to_end(runs_on(dag, server), QUERY, mode="COMPLEX")

    result = first(events, "WORKFLOW_COMPLETED")["payload"]["result"]
    assert result == "What the team's steps found:\n- Research A: A is 1.\n- Research B: B is 2."
