"""A COMPLEX run handed over mid-round: the steps over stand, the step in flight goes on
from its log on the new replica (not started again), and the team answers as before."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from services.executor.adapters.events import GrpcRunLeases
from services.executor.lease import Leasing
from services.executor.ports import RunRequest
from services.executor.runs import RunManager
from shuttle.llm.openai_model import OpenAIModel
from tests.executor.conftest import TENANT, Backends, first, of_type, types_of
from tests.executor.test_takeover import LEASE_SECONDS, POLL_SECONDS
from tests.support.scripted_openai import Reply, text, tool_call
from tests.support.team_model import StepReply, TeamModel, TimedScriptedOpenAI, plan


def calculating(expression: str, answer: str) -> StepReply:
    """A step's reply that depends on its conversation alone: a call made again after a
    takeover gets the reply the first one got."""

    def reply(body: dict[str, Any]) -> Reply:
        if any(m.get("role") == "tool" for m in body["messages"]):
            return text(answer)
        return tool_call("calculator", {"expression": expression})

    return reply


@pytest.fixture
def team() -> TeamModel:
    return TeamModel(
        plans=[
            plan(
                ("s1", "Research A", []), ("s2", "Research B", []), ("s3", "Compare", ["s1", "s2"])
            )
        ],
        steps={
            "s1": [calculating("6*7", "A is 42")] * 3,
            "s2": [calculating("6*6", "B is 36")] * 3,
        },
    )


def replica(dag: Backends, server: TimedScriptedOpenAI, owner: str) -> RunManager:
    llm = OpenAIModel(server.base_url, "k", "scripted-model", 60.0, 0)
    leasing = Leasing(
        GrpcRunLeases(dag.client), owner, LEASE_SECONDS, takeover_poll_seconds=POLL_SECONDS
    )
    return dag.run_manager(llm, leasing=leasing)


async def handed_over_mid_answer(
    dag: Backends,
    server: TimedScriptedOpenAI,
    a: RunManager,
    b: RunManager,
    request: RunRequest,
) -> list[dict[str, Any]]:
    """The log of `request` started on `a`, handed over to `b` while its answer streamed."""
    answering = threading.Event()
    server.hold("synthesis", until=answering)
    try:
        workflow_id = await a.start(request)
        await asyncio.to_thread(server.arrival("synthesis").wait, 60)
        await a.shutdown()
        b.start_takeovers()
        await dag.first_event(workflow_id, lambda e: e["type"] == "ERROR_RECOVERY")
        answering.set()
        return await dag.read_log(workflow_id)
    finally:
        answering.set()
        await b.shutdown()


async def test_a_team_handed_over_mid_step_finishes_on_another_replica(
    dag: Backends, server: TimedScriptedOpenAI, team: TeamModel
) -> None:
    a, b = replica(dag, server, "replica-a"), replica(dag, server, "replica-b")
    s2_released = threading.Event()
    server.hold("s2", until=s2_released)
    try:
        workflow_id = await a.start(RunRequest("Compare A and B", TENANT, mode="COMPLEX"))
        # s1 is over; s2's first model call is in flight.
        await dag.first_event(
            workflow_id, lambda e: e["type"] == "AGENT_COMPLETED" and e["agent_id"] == "s1"
        )
        await dag.first_event(
            workflow_id, lambda e: e["type"] == "AGENT_STARTED" and e["agent_id"] == "s2"
        )
        await a.shutdown()
        b.start_takeovers()
        s2_released.set()
        events = await dag.read_log(workflow_id)
    finally:
        s2_released.set()
        await b.shutdown()

    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert types_of(events)[-2:] == ["WORKFLOW_COMPLETED", "STREAM_END"]
    assert "ERROR_RECOVERY" in types_of(events)
    started = [e["agent_id"] for e in of_type(events, "AGENT_STARTED")]
    assert sorted(started) == ["s1", "s2", "s3"], "no step started twice"
    completed = [e["agent_id"] for e in of_type(events, "AGENT_COMPLETED")]
    assert sorted(completed) == ["s1", "s2", "s3"]
    observed = [e["payload"]["call_id"] for e in of_type(events, "TOOL_OBSERVATION")]
    assert sorted(observed) == ["s1.1.0", "s2.1.0"]
    assert first(events, "WORKFLOW_COMPLETED")["payload"]["result"] == team.synthesis
    assert "B is 36" in team.prompt_text("s3")


async def test_a_team_handed_over_mid_answer_answers_again_from_the_start(
    dag: Backends, server: TimedScriptedOpenAI, team: TeamModel
) -> None:
    a, b = replica(dag, server, "replica-a"), replica(dag, server, "replica-b")
    request = RunRequest("Compare A and B", TENANT, mode="COMPLEX")
    events = await handed_over_mid_answer(dag, server, a, b, request)

    assert types_of(events)[-2:] == ["WORKFLOW_COMPLETED", "STREAM_END"]
    answer = [e for e in events if e["agent_id"] == "synthesizer" and e["type"] != "LLM_PROMPT"]
    assert answer[0]["type"] == "STATUS_UPDATE"
    assert answer[0]["payload"]["kind"] == "answer_restarted"
    deltas = of_type(answer, "THREAD_MESSAGE_DELTA")
    assert [d["payload"]["index"] for d in deltas] == list(range(len(deltas)))
    (completed,) = of_type(events, "THREAD_MESSAGE_COMPLETED")
    assert completed["payload"]["content"] == team.synthesis
    assert sorted(e["agent_id"] for e in of_type(events, "AGENT_STARTED")) == ["s1", "s2", "s3"]
