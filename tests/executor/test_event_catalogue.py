"""The log tells the truth: over runs that use the features (a team whose step works through
data with a tool, a reviewed round, a run that selects tools and spends its budget), every
event carries the payload fields the event catalogue gives its type, and its timestamp is
when it happened."""

from __future__ import annotations

import json
from typing import Any

import pytest

from shuttle.llm.openai_model import OpenAIModel
from shuttle.v1 import events_pb2
from tests.executor.conftest import TENANT, Backends, first, of_type, types_of
from tests.support.scripted_openai import text, tool_call
from tests.support.team_model import TeamModel, TimedScriptedOpenAI, plan, verdict

pytestmark = pytest.mark.integration

CATALOGUE: dict[str, set[str]] = {
    "WORKFLOW_STARTED": {"query", "mode", "session_id", "estimated_complexity"},
    "WORKFLOW_COMPLETED": {
        "result",
        "duration_ms",
        "total_tokens",
        "total_cost_usd",
        "agents_used",
        "tools_invoked",
    },
    "AGENT_STARTED": {"role", "subtask", "tools_available"},
    "AGENT_COMPLETED": {"result", "tokens_used", "cost_usd", "duration_ms"},
    "TOOL_INVOKED": {"tool_name", "tool_args", "timeout_seconds"},
    "TOOL_OBSERVATION": {"tool_name", "result", "duration_ms", "truncated"},
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
    "LLM_PROMPT": {"model", "prompt_length", "max_tokens", "temperature", "sanitized_prompt"},
    "LLM_PARTIAL": {"chunk", "chunk_index", "total_tokens_so_far"},
    "LLM_OUTPUT": {"output", "model", "provider", "usage", "cost_usd", "duration_ms"},
    "PROGRESS": {"percentage", "current_step", "total_steps", "current_task"},
    "DATA_PROCESSING": {"operation", "records_processed", "total_records", "processing_stage"},
    "ERROR_OCCURRED": {"error_type", "error_message", "recoverable"},
    "ROLE_ASSIGNED": {"role", "capabilities", "tools"},
    "STATUS_UPDATE": {"status", "details"},
    "WORKSPACE_UPDATED": {"key", "value", "action"},
    "BUDGET_THRESHOLD": {
        "usage_percent",
        "threshold_percent",
        "tokens_used",
        "tokens_budget",
        "level",
        "budget_type",
    },
    "THREAD_MESSAGE_DELTA": {"delta", "index"},
    "THREAD_MESSAGE_COMPLETED": {"content", "total_tokens"},
}
"""The catalogue's fields by type (types whose catalogue entry lists none are left out)."""

DATA = json.dumps([{"region": "north", "sales": 10}, {"region": "south", "sales": 32}])


@pytest.fixture
def team() -> TeamModel:
    return TeamModel(
        plans=[plan(("s1", "Total the sales", []), ("s2", "Write it up", ["s1"]))],
        verdicts=[verdict(True, 0.9, "42 in all")],
        steps={
            "s1": [
                tool_call(
                    "json_transform",
                    {"operation": "query", "data": DATA, "expression": "sum([].sales)"},
                ),
                text("The sales total 42."),
            ]
        },
    )


def missing_fields(events: list[dict[str, Any]]) -> list[tuple[int, str, set[str]]]:
    """(seq, type, fields missing) for every event short of its catalogued fields."""
    gaps = []
    for event in events:
        wanted = set(CATALOGUE.get(event["type"], set()))
        if event["type"] == "AGENT_THINKING" and event["payload"].get("status") == "done":
            wanted = {"thought", "next_action"}
        missing = wanted - set(event["payload"])
        if missing:
            gaps.append((event["seq"], event["type"], missing))
    return gaps


async def test_every_event_of_a_team_run_carries_its_catalogued_fields(
    dag: Backends, server: TimedScriptedOpenAI, team: TeamModel
) -> None:
    llm = OpenAIModel(server.base_url, "k", "scripted-model", 10.0, 0)
    events = await dag.run_to_end(dag.run_manager(llm), "Total the sales", mode="COMPLEX")

    assert types_of(events)[-2:] == ["WORKFLOW_COMPLETED", "STREAM_END"]
    assert missing_fields(events) == []
    seen = set(types_of(events))
    for produced in ("DATA_PROCESSING", "LLM_PROMPT", "DEPENDENCY_SATISFIED", "ROLE_ASSIGNED"):
        assert produced in seen
    (processed,) = of_type(events, "DATA_PROCESSING")
    assert processed["agent_id"] == "s1"
    assert processed["payload"]["records_processed"] == 2
    assert processed["payload"]["bytes_processed"] == len(DATA)
    # Between the call and its observation, as it happened.
    s1 = [e["type"] for e in events if e["agent_id"] == "s1"]
    assert s1.index("TOOL_INVOKED") < s1.index("DATA_PROCESSING") < s1.index("TOOL_OBSERVATION")
    reviewed = [e for e in of_type(events, "AGENT_THINKING") if e["agent_id"] == "reviewer"]
    assert [e["payload"]["confidence"] for e in reviewed] == [0.9]
    prompt = next(e["payload"] for e in of_type(events, "LLM_PROMPT") if e["agent_id"] == "s1")
    assert prompt["model"] == "scripted-model"
    assert "Total the sales" in prompt["sanitized_prompt"]
    assert prompt["prompt_length"] >= len(prompt["sanitized_prompt"])
    # Each event is stamped when it was made: seq order is time order.
    page = await dag.events.List(
        events_pb2.ListRequest(workflow_id=events[0]["workflow_id"], tenant_id=TENANT, limit=1000)
    )
    stamps = [e.timestamp.ToNanoseconds() for e in page.events]
    assert stamps == sorted(stamps) and len(set(stamps)) > 1


async def test_every_event_of_a_run_over_budget_carries_its_catalogued_fields(
    dag: Backends, server: TimedScriptedOpenAI, team: TeamModel
) -> None:
    team.tokens_per_call = 60
    llm = OpenAIModel(server.base_url, "k", "scripted-model", 10.0, 0)
    runs = dag.run_manager(llm, tool_selection_threshold=0, token_budget=70)
    events = await dag.run_to_end(runs, "Say something", mode="STANDARD")

    assert types_of(events)[-2:] == ["WORKFLOW_COMPLETED", "STREAM_END"]
    assert missing_fields(events) == []
    seen = set(types_of(events))
    assert {"STATUS_UPDATE", "BUDGET_THRESHOLD"} <= seen
    status = first(events, "STATUS_UPDATE")["payload"]
    assert (status["status"], status["details"]) == (
        "selecting_tools",
        first(events, "STATUS_UPDATE")["message"],
    )
