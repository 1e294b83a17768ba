"""The planner's calls for a run (routing it, choosing its tools) are the run's: they count
in its usage, its cost and its budget, and a run taken over still counts them."""

from __future__ import annotations

from dataclasses import replace

import pytest

from services.executor.adapters.events import GrpcWorkflowRegistry, run_sink
from services.executor.runs import RunManager
from shuttle.llm.openai_model import OpenAIModel
from tests.executor.conftest import TENANT, Backends, agent_defaults, first, of_type, types_of
from tests.support.agent_model import AgentModel, answer, calc
from tests.support.scripted_openai import ScriptedOpenAI

pytestmark = pytest.mark.integration


def routed_runs(backends: Backends, server: ScriptedOpenAI, token_budget: int = 0) -> RunManager:
    """Runs routed by the planner, which also chooses among every tool (threshold 0)."""
    return RunManager(
        registry=GrpcWorkflowRegistry(backends.client),
        sinks=lambda wf, tenant, epoch: run_sink(backends.client, wf, tenant, lease_epoch=epoch),
        tools=backends.tools,
        llm=OpenAIModel(server.base_url, "test-key", "scripted-model", 10.0, 0),
        settings=replace(
            agent_defaults(),
            tool_timeout_seconds=10,
            tool_selection_threshold=0,
            token_budget=token_budget or agent_defaults().token_budget,
        ),
        router=backends.planner,
        selector=backends.planner,
    )


async def test_routing_and_tool_selection_count_in_the_runs_usage(
    backends: Backends, model: ScriptedOpenAI
) -> None:
    script = AgentModel(calc("1+2"), answer("3"), synthesis="3.")
    model.set_handler(script)
    query = "Use the calculator to add the first two primes"
    # What the planner's own model spends on this query, asked directly.
    routing = (await backends.planner.route("wf-probe", query, "", TENANT)).usage
    assert routing.total_tokens > 0

    events = await backends.run_to_end(routed_runs(backends, model), query)

    assert types_of(events)[-2:] == ["WORKFLOW_COMPLETED", "STREAM_END"]
    started = first(events, "WORKFLOW_STARTED")["payload"]
    assert started["routing"]["usage"]["total_tokens"] == routing.total_tokens
    selected = next(
        e["payload"]
        for e in of_type(events, "STATUS_UPDATE")
        if e["payload"].get("phase") == "tools_selected"
    )
    # (With a catalog this small the planner offers every tool without asking its model.)
    selection_tokens = selected["usage"]["total_tokens"]
    model_tokens = sum(e["payload"]["usage"]["total_tokens"] for e in of_type(events, "LLM_OUTPUT"))
    completed = first(events, "WORKFLOW_COMPLETED")["payload"]
    assert completed["total_tokens"] == model_tokens + routing.total_tokens + selection_tokens


async def test_the_planners_calls_spend_the_runs_budget(
    backends: Backends, model: ScriptedOpenAI
) -> None:
    script = AgentModel(calc("1+2"), answer("3"), synthesis="3.")
    model.set_handler(script)
    query = "Use the calculator to add the first two primes"
    routing = (await backends.planner.route("wf-probe", query, "", TENANT)).usage

    # A budget that routing alone spends: the agent makes no model call of its own.
    runs = routed_runs(backends, model, token_budget=routing.total_tokens)
    events = await backends.run_to_end(runs, query)

    assert types_of(events)[-2:] == ["WORKFLOW_COMPLETED", "STREAM_END"]
    exceeded = [
        e
        for e in of_type(events, "ERROR_OCCURRED")
        if e["payload"]["error_type"] == "BUDGET_EXCEEDED"
    ]
    assert len(exceeded) == 1
    assert script.loop_calls == []
