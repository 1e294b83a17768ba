"""A COMPLEX task through the gateway: five processes, the planner and every step agent on
the scripted model, the team's events on the SSE stream, the answer on the task."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.scripted_openai import ScriptedOpenAI
from tests.support.sse import read_stream
from tests.support.stack import Stack, start_stack
from tests.support.team_model import TeamModel, plan

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def team() -> TeamModel:
    return TeamModel(
        plans=[plan(("s1", "Find A", []), ("s2", "Find B", []), ("s3", "Compare", ["s1", "s2"]))],
        synthesis="A and B compared.",
    )


@pytest.fixture(scope="module")
def stack(team: TeamModel, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    model = ScriptedOpenAI(handler=team).start()
    started = start_stack(Path(tmp_path_factory.mktemp("dag")), model.base_url)
    yield started
    started.stop()
    model.stop()


def test_a_complex_task_runs_as_a_team_and_streams_its_answer(
    stack: Stack, team: TeamModel
) -> None:
    created = httpx.post(
        f"{stack.gateway}/api/v1/tasks",
        json={"query": "Compare A and B", "mode": "complex"},
        timeout=30,
    )
    assert created.status_code == 201, created.text
    workflow_id = created.json()["workflow_id"]
    status, frames = read_stream(stack.gateway, f"/api/v1/stream/sse?workflow_id={workflow_id}")
    assert status == 200
    events = [json.loads(f.data) for f in frames]
    types = [e["type"] for e in events]

    assert types[0] == "WORKFLOW_STARTED" and events[0]["payload"]["mode"] == "COMPLEX"
    assert types[-2:] == ["WORKFLOW_COMPLETED", "STREAM_END"]
    for wanted in (
        "TEAM_RECRUITED",
        "ROLE_ASSIGNED",
        "TEAM_STATUS",
        "DEPENDENCY_SATISFIED",
        "MESSAGE_SENT",
        "MESSAGE_RECEIVED",
        "PROGRESS",
        "TEAM_RETIRED",
        "THREAD_MESSAGE_COMPLETED",
    ):
        assert wanted in types, wanted
    assert {e["agent_id"] for e in events if e["type"] == "AGENT_COMPLETED"} == {"s1", "s2", "s3"}

    task = httpx.get(f"{stack.gateway}/api/v1/tasks/{workflow_id}", timeout=10).json()
    assert task["status"] == "completed"
    assert task["result"] == "A and B compared."
    assert len(team.calls["plan"]) == 1 and len(team.calls["analysis"]) == 1
