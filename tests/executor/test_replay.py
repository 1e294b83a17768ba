"""The agent's state folded from its log equals the live state, at every loop call and at
the end, for every kind of run: both modes, tools, parallel calls, follow-ups, every guard,
compaction, the budget, a pause, an approval, tool selection. This is what a run taken over
by another executor goes on from."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from services.executor.engine.modes import NATIVE_SYSTEM_PROMPT
from services.executor.engine.state import LoopState, Stage
from shuttle.v1 import tools_pb2, tools_pb2_grpc
from tests.executor.conftest import TENANT, Backends, agent_defaults, running_backends
from tests.executor.live_runs import LiveAgent, folded, loop_calls, recorded, through
from tests.executor.test_engine_modes import window_for
from tests.support.agent_model import AgentModel, Step, answer, calc, raw
from tests.support.scripted_openai import Handler, Reply, ScriptedOpenAI
from tests.tools.approval_support import HOOKS_GATING_CALCULATOR

QUIET: dict[str, Any] = {"completion_check": False, "reflection_interval": 0, "cycle_threshold": 0}


@pytest.fixture(params=["native", "json"])
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def server() -> Iterator[ScriptedOpenAI]:
    started = ScriptedOpenAI().start()
    yield started
    started.stop()


def live(backends: Backends, mode: str, query: str = "What is 12*7?", **kw: Any) -> LiveAgent:
    """A live agent in `mode` with the deployment's settings but `kw`."""
    settings = replace(
        agent_defaults(), tool_timeout_seconds=10, use_native_tools=mode == "native", **kw
    )
    return LiveAgent(backends, settings, query)


async def assert_replays(run: LiveAgent, final: LoopState) -> list[Any]:
    """The fold of the whole log is the final state; the fold up to each loop call's
    AGENT_THINKING is the state the model was called in. The log's events."""
    events = await recorded(run.backends, run.workflow_id)
    recovery = await folded(run.backends, events, run.settings, run.ctx)
    assert recovery.agent is not None and recovery.route is not None
    assert final.stage is Stage.DONE
    assert recovery.agent.state == final
    calls = loop_calls(events)
    assert len(calls) == len(run.snapshots) > 0
    for call, snapshot in zip(calls, run.snapshots, strict=True):
        partial = await folded(run.backends, through(events, call), run.settings, run.ctx)
        assert partial.agent is not None
        assert partial.agent.state == snapshot, f"at iteration {snapshot.iteration}"
    return events


async def test_tool_calls_in_each_mode(
    backends: Backends, server: ScriptedOpenAI, mode: str
) -> None:
    run = live(backends, mode, **QUIET)
    script = AgentModel(calc("12*7"), calc("84+1"), answer("85."), synthesis="It is 85.")
    final = await run.run(server, script)
    assert final.answer == "It is 85." and len(final.steps) == 2
    await assert_replays(run, final)


async def test_parallel_calls(backends: Backends, server: ScriptedOpenAI) -> None:
    run = live(backends, "native", **QUIET)
    both = Step(
        calls=[("calculator", {"expression": "2+2"}), ("calculator", {"expression": "3*3"})]
    )
    final = await run.run(server, AgentModel(both, answer("4 and 9")))
    assert [s.outcome.observation for s in final.steps] == ["4", "9"]
    await assert_replays(run, final)


async def test_follow_ups_taken_where_each_mode_takes_them(
    backends: Backends, server: ScriptedOpenAI, mode: str
) -> None:
    run = live(backends, mode, **QUIET)
    first = calc("2+2")
    first.during = run.interrupt("Also in words.")
    early = Step(answer="4.", during=run.interrupt("Show your work.", "And use French."))
    final = await run.run(server, AgentModel(first, early, answer("4, quatre")))
    assert final.interrupted
    events = await assert_replays(run, final)
    taken = {seq for e in events if e.get("kind") == "interrupt" for seq in e.get("seqs")}
    received = {e.seq for e in events if e.type == "MESSAGE_RECEIVED"}
    assert taken == received and len(received) == 3


async def test_guards_cycle_warning_reflection_and_checklist(
    backends: Backends, server: ScriptedOpenAI, mode: str
) -> None:
    run = live(
        backends,
        mode,
        cycle_threshold=2,
        reflection_interval=2,
        completion_check=True,
        completion_check_min_tools=1,
    )
    script = AgentModel(calc("1+1"), calc("1+1"), calc("2+2"), answer("2"), answer("2, checked"))
    final = await run.run(server, script)
    events = await assert_replays(run, final)
    kinds = [e.get("kind") for e in events if e.type == "STATUS_UPDATE"]
    assert {"cycle_warning", "self_reflection", "completion_check"} <= set(kinds)
    assert final.checklist.fired and final.reflection.calls == 3


async def test_a_reply_that_is_no_action_asks_for_a_reformat(
    backends: Backends, server: ScriptedOpenAI
) -> None:
    run = live(backends, "json", **QUIET)
    script = AgentModel(raw("I think 4"), calc("2+2"), raw("still prose"), raw("prose again"))
    final = await run.run(server, script)
    assert final.reformat_pending and final.iteration == 4
    await assert_replays(run, final)


@pytest.mark.parametrize("summary_works", [True, False])
async def test_compaction(
    backends: Backends, server: ScriptedOpenAI, mode: str, summary_works: bool
) -> None:
    query = "Compute some large powers of seven"
    window = await window_for(backends, mode, query, room=700)
    run = live(backends, mode, query, **QUIET, context_tokens=window, compact_keep_recent=2)
    steps = [calc(f"7**{1000 - i}") for i in range(6)]
    summary = "7**1000 and 7**999 were computed." if summary_works else None
    final = await run.run(server, AgentModel(*steps, answer("Big."), summary=summary))
    events = await assert_replays(run, final)
    assert any(e.type == "WORKSPACE_UPDATED" for e in events)


def costing(script: Handler, tokens: int) -> Handler:
    """Every loop call reports `tokens` spent."""

    def handle(body: dict[str, Any]) -> Reply:
        reply = script(body)
        if body.get("stream"):
            return reply
        usage = {"prompt_tokens": tokens - 7, "completion_tokens": 7, "total_tokens": tokens}
        return replace(reply, usage=usage)

    return handle


async def test_the_budget_warns_then_ends_the_loop(
    backends: Backends, server: ScriptedOpenAI, mode: str
) -> None:
    run = live(backends, mode, **QUIET, token_budget=250, budget_warn_percent=80.0)
    script = AgentModel(calc("1+1"), calc("2+2"), calc("3+3"), answer("never"))
    final = await run.run(server, costing(script, 100))
    assert final.budget_exceeded and final.budget.warned and final.budget.exhaustion_seen
    events = await assert_replays(run, final)
    assert [e.type for e in events].count("BUDGET_THRESHOLD") == 1


async def test_a_pause_and_its_resume(backends: Backends, server: ScriptedOpenAI) -> None:
    run = live(backends, "native", **QUIET)
    first = calc("6*7")
    first.during = run.pause()
    task = asyncio.create_task(run.resume_once_paused())
    final = await run.run(server, AgentModel(first, answer("42")))
    await task
    events = await assert_replays(run, final)
    assert [e.type for e in events].count("WORKFLOW_PAUSED") == 1


async def test_tools_selected_among_many(backends: Backends, server: ScriptedOpenAI) -> None:
    run = live(backends, "native", **QUIET, tool_selection_threshold=1, tool_selection_max=2)
    final = await run.run(server, AgentModel(calc("6*7"), answer("42")))
    events = await assert_replays(run, final)
    assert any(e.get("phase") == "tools_selected" for e in events)


@pytest.fixture
async def gated(tmp_path: Path) -> AsyncIterator[Backends]:
    async with running_backends(tmp_path, tool_hooks=HOOKS_GATING_CALCULATOR) as started:
        yield started


async def test_an_approved_call(gated: Backends, server: ScriptedOpenAI) -> None:
    run = live(gated, "native", **QUIET)

    async def approve() -> None:
        requested = await gated.first_event(
            await run.started(), lambda e: e["type"] == "APPROVAL_REQUESTED"
        )
        tools = tools_pb2_grpc.ToolServiceStub(gated.channels[1])
        await tools.DecideApproval(
            tools_pb2.DecideApprovalRequest(
                approval_id=requested["payload"]["approval_id"],
                tenant_id=TENANT,
                decision="approved",
                decided_by="operator",
            )
        )

    approving = asyncio.create_task(approve())
    final = await run.run(server, AgentModel(calc("6*7"), answer("42")))
    await approving
    assert final.steps[0].outcome.observation == "42"
    await assert_replays(run, final)


async def test_a_simple_run_at_its_cap_still_calling_tools_goes_on_as_standard(
    backends: Backends, server: ScriptedOpenAI, mode: str
) -> None:
    run = live(backends, mode, max_iterations=3, escalate_max_iterations=8, **QUIET)
    script = AgentModel(*(calc(f"{n}+1") for n in range(4)), answer("4"), synthesis="Four.")
    final = await run.run(server, script)
    assert final.escalated and final.answer == "Four." and len(final.steps) == 4
    events = await assert_replays(run, final)
    escalated = [e for e in events if e.type == "STATUS_UPDATE" and e.get("kind") == "escalated"]
    assert len(escalated) == 1 and escalated[0].get("max_iterations") == 8


async def test_a_run_that_ignores_three_cycle_warnings_loses_its_tools(
    backends: Backends, server: ScriptedOpenAI
) -> None:
    run = live(backends, "native", **{**QUIET, "cycle_threshold": 2})
    script = AgentModel(*(calc("1+1") for _ in range(5)), answer("2"), synthesis="Two.")
    final = await run.run(server, script)
    assert final.tools_withdrawn and final.answer == "Two."
    events = await assert_replays(run, final)
    kinds = [e.get("kind") for e in events if e.type == "STATUS_UPDATE"]
    assert kinds.count("cycle_warning") == 4 and kinds.count("tools_withdrawn") == 1
    last_call = script.loop_calls[-1]
    assert "tools" not in last_call or not last_call["tools"]


@pytest.mark.parametrize(
    ("reply", "kind"), [("", "empty_reply"), (NATIVE_SYSTEM_PROMPT, "echoed_prompt")]
)
async def test_an_empty_or_echoed_reply_is_nudged(
    backends: Backends, server: ScriptedOpenAI, reply: str, kind: str
) -> None:
    run = live(backends, "native", **QUIET)
    final = await run.run(server, AgentModel(raw(reply), answer("4"), synthesis="Four."))
    assert final.answer == "Four." and not final.nudged  # the nudge was heeded
    events = await assert_replays(run, final)
    kinds = [e.get("kind") for e in events if e.type == "STATUS_UPDATE"]
    assert kinds.count(kind) == 1
