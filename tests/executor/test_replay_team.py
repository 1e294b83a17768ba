"""A COMPLEX run's team folded from its log equals the live team, at each review and at the
end: rounds, plans, every step's record, the budget, the follow-ups the reviews took."""

from __future__ import annotations

from dataclasses import replace

import pytest

from services.executor.dag.state import TeamStage
from tests.executor.conftest import Backends, agent_defaults
from tests.executor.live_runs import LiveTeam, folded, recorded
from tests.support.scripted_openai import text, tool_call
from tests.support.team_model import TeamModel, TimedScriptedOpenAI, plan, verdict


@pytest.fixture
def team() -> TeamModel:
    return TeamModel(plans=[])


async def assert_replays(run: LiveTeam) -> None:
    assert run.team is not None
    events = await recorded(run.backends, run.workflow_id)
    recovery = await folded(run.backends, events, run.settings, run.ctx)
    assert recovery.team == run.team.state
    assert recovery.running == {}
    reviews = [e for e in events if e.get("phase") == "analyzed"]
    assert len(reviews) == len(run.reviews) > 0
    for review, live in zip(reviews, run.reviews, strict=True):
        before = [e for e in events if e.seq < review.seq]
        partial = await folded(run.backends, before, run.settings, run.ctx)
        assert partial.team == live, f"before the review of round {live.round}"


async def test_two_rounds_with_a_follow_up(
    dag: Backends, server: TimedScriptedOpenAI, team: TeamModel
) -> None:
    run = LiveTeam(dag, replace(agent_defaults(), tool_timeout_seconds=10), "Compare A and B")
    team.plans = [
        plan(("s1", "Research A", []), ("s2", "Research B", []), ("s3", "Compare", ["s1", "s2"])),
        plan(("s1", "Check the comparison", [])),
    ]
    team.verdicts = [verdict(False, 0.3), verdict(True, 0.95, "A beats B")]
    team.steps = {
        "s1": [tool_call("calculator", {"expression": "6*7"}), text("A is 42")],
        "s2": [run.interrupt("Mind the units.", text("B is 41"))],
    }
    result = await run.run(server, team)
    assert result.rounds == 2 and result.answer == "The team's final answer."
    assert run.team is not None and run.team.state.stage is TeamStage.DONE
    await assert_replays(run)
    events = await recorded(dag, run.workflow_id)
    taken = [e.get("follow_up_seqs") for e in events if e.get("phase") == "analyzed"]
    assert taken == [
        [next(e.seq for e in events if e.type == "MESSAGE_RECEIVED" and e.get("from") == "user")],
        [],
    ]


async def test_a_spent_budget(dag: Backends, server: TimedScriptedOpenAI, team: TeamModel) -> None:
    settings = replace(agent_defaults(), tool_timeout_seconds=10, token_budget=2_500)
    run = LiveTeam(dag, settings, "Compare A and B")
    team.tokens_per_call = 1_000
    team.plans = [plan(("s1", "Research A", []), ("s2", "Then B", ["s1"]))]
    team.steps = {"s1": [tool_call("calculator", {"expression": "6*7"}), text("A")]}
    result = await run.run(server, team)
    assert run.team is not None and run.team.state.budget.exhausted
    assert "budget" in result.answer
    events = await recorded(dag, run.workflow_id)
    recovery = await folded(dag, events, settings, run.ctx)
    assert recovery.team == run.team.state
