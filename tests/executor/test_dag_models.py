"""A COMPLEX run's steps run on the models their plan hints at."""

from __future__ import annotations

import pytest

from shuttle.llm.factory import ModelRegistry, RegisteredModel
from shuttle.llm.openai_model import OpenAIModel
from shuttle.llm.protocol import ROLES
from tests.executor.conftest import Backends, of_type, types_of
from tests.executor.test_dag import executor_model
from tests.support.team_model import TeamModel, TimedScriptedOpenAI

pytestmark = pytest.mark.integration


@pytest.fixture
def team() -> TeamModel:
    return TeamModel(plans=[])


async def test_a_step_runs_on_the_model_its_plan_hints(
    dag: Backends, server: TimedScriptedOpenAI, team: TeamModel
) -> None:
    team.plans = [
        {
            "steps": [
                {"id": "s1", "task": "Research A"},
                {"id": "s2", "task": "Research B", "model_hint": "careful"},
            ]
        }
    ]
    careful_team = TeamModel(plans=[])
    careful_server = TimedScriptedOpenAI(careful_team)
    careful_server.start()
    careful = OpenAIModel(careful_server.base_url, "k", "careful-model", 10.0, 0)
    default = executor_model(server)
    registry = ModelRegistry(
        [RegisteredModel("main", ROLES, default), RegisteredModel("careful", ("general",), careful)]
    )
    try:
        runs = dag.run_manager(default, models=registry)
        events = await dag.run_to_end(runs, "Compare A and B", mode="COMPLEX")
    finally:
        careful_server.stop()

    assert types_of(events)[-2:] == ["WORKFLOW_COMPLETED", "STREAM_END"]
    assert "s1" in team.calls and "s2" not in team.calls
    assert set(careful_team.calls) == {"s2"}
    prompts = {e["agent_id"]: e["payload"]["model"] for e in of_type(events, "LLM_PROMPT")}
    assert (prompts["s1"], prompts["s2"]) == ("scripted-model", "careful-model")
