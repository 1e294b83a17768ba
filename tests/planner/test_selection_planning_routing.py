"""Tool selection, DAG plans, plan analysis and routing, against the scripted provider."""

from __future__ import annotations

import json
from typing import Any

import pytest

from services.planner.analysis import analyze_plan
from services.planner.planning import make_plan, validate_plan
from services.planner.routing import Mode, fast_route, route
from services.planner.selection import ToolInfo, catalog_line, select_tools
from services.planner.structured import StructuredOutputError
from shuttle.plans import PlanError, StepResult
from tests.planner.conftest import llm_with
from tests.support.scripted_openai import ScriptedOpenAI, error, text, tool_call

TOOLS = [
    ToolInfo(f"tool_{i}", f"Does thing number {i}. " + "More detail. " * 10) for i in range(20)
]
NAMES = [t.name for t in TOOLS]


def selecting(server: ScriptedOpenAI) -> Any:
    return llm_with(server, tool_call=True, json_mode=True)


async def test_few_tools_are_all_kept_without_a_call(server: ScriptedOpenAI) -> None:
    selection = await select_tools(selecting(server), "q", TOOLS[:12])
    assert selection.names == NAMES[:12] and not selection.fell_back
    assert server.requests == []


async def test_the_model_picks_from_a_compact_catalog(server: ScriptedOpenAI) -> None:
    picked = ["tool_7", "tool_3", "tool_3", "nonexistent", "tool_9"]
    server.script(tool_call("select_tools", {"tools": picked}))
    selection = await select_tools(selecting(server), "find it", TOOLS, pinned=["tool_0", "nope"])
    assert selection.names == ["tool_0", "tool_3", "tool_7", "tool_9"]
    assert not selection.fell_back and selection.usage.total_tokens > 0
    catalog = server.requests[0]["messages"][0]["content"]
    lines = [line for line in catalog.splitlines() if line.startswith("- tool_")]
    assert len(lines) == 20 and all(len(line) <= 80 for line in lines)
    assert "parameters" not in catalog


async def test_at_most_max_tools_are_picked(server: ScriptedOpenAI) -> None:
    server.script(tool_call("select_tools", {"tools": NAMES[:10]}))
    selection = await select_tools(selecting(server), "q", TOOLS, max_tools=6)
    assert selection.names == NAMES[:6]


@pytest.mark.parametrize(
    "replies",
    [
        [tool_call("select_tools", {"tools": ["ghost", "phantom"]})],  # no known name
        [error(400, "bad request")] * 5,  # every level fails at the provider
        [text("I'd use the good ones.")] * 5,  # nothing parseable anywhere
    ],
)
async def test_any_selection_failure_gives_back_the_full_set(
    server: ScriptedOpenAI, replies: list[Any]
) -> None:
    server.script(*replies)
    selection = await select_tools(selecting(server), "q", TOOLS)
    assert selection.names == NAMES and selection.fell_back


def test_a_catalog_line_is_cut_to_about_80_characters() -> None:
    line = catalog_line(ToolInfo("web_search", "Search the web.\nSecond line ignored."))
    assert line == "- web_search: Search the web."
    long = catalog_line(TOOLS[0])
    assert len(long) == 80 and long.endswith("…")


# -- plans ----------------------------------------------------------------------------------


def test_a_near_miss_plan_is_repaired() -> None:
    plan = validate_plan(
        {
            "steps": [
                {"task": "Collect prices"},
                {"id": "s2", "task": "Collect reviews", "dependencies": "s1"},
                {"id": "s3", "task": "Compare", "depends_on": [1, "s2", "s3", "s2"]},
            ]
        }
    )
    assert [(s.id, s.dependencies) for s in plan.steps] == [
        ("s1", ()),
        ("s2", ("s1",)),
        ("s3", ("s1", "s2")),
    ]
    assert len(plan.repairs) == 5


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"steps": []}, "the plan has no steps"),
        ({}, "the plan has no steps"),
        ({"steps": ["do it"]}, "steps[0] is not an object"),
        ({"steps": [{"id": "a", "task": "  "}]}, "step 'a' has no task"),
        ({"steps": [{"id": "a", "task": '":{'}]}, "step 'a': '\":{' is not a task"),
        (
            {"steps": [{"id": "a", "task": "x"}, {"id": "a", "task": "y"}]},
            "step id 'a' is used by steps[0] and steps[1]",
        ),
        ({"steps": [{"id": "a", "task": "x", "dependencies": ["z"]}]}, "unknown step 'z'"),
        (
            {
                "steps": [
                    {"id": "a", "task": "x", "dependencies": ["c"]},
                    {"id": "b", "task": "y", "dependencies": ["a"]},
                    {"id": "c", "task": "z", "dependencies": ["b"]},
                ]
            },
            "cycle",
        ),
        ({"steps": [{"id": "a", "task": "x", "dependencies": {"b": 1}}]}, "must be a list"),
        ({"steps": [{"task": "x"}] * 21}, "at most 20"),
    ],
)
def test_a_malformed_plan_is_rejected_with_a_clear_error(raw: Any, message: str) -> None:
    with pytest.raises(PlanError, match=message.replace("[", r"\[").replace("]", r"\]")):
        validate_plan(raw)


async def test_a_plan_with_a_cycle_sends_the_model_down_the_chain(server: ScriptedOpenAI) -> None:
    cyclic = {
        "steps": [
            {"id": "a", "task": "x", "dependencies": ["b"]},
            {"id": "b", "task": "y", "dependencies": ["a"]},
        ]
    }
    good = {"steps": [{"id": "a", "task": "x"}, {"id": "b", "task": "y", "dependencies": ["a"]}]}
    server.script(tool_call("submit_plan", cyclic), text(json.dumps(good)))
    outcome = await make_plan(selecting(server), "do x then y", TOOLS[:2], context="")
    assert [s.dependencies for s in outcome.plan.steps] == [(), ("a",)]
    assert outcome.attempts == 2
    assert "tool_0" in server.requests[0]["messages"][0]["content"]


async def test_a_plan_that_never_validates_names_the_problem(server: ScriptedOpenAI) -> None:
    bad = {"steps": [{"id": "a", "task": "x", "dependencies": ["missing"]}]}
    server.set_handler(
        lambda body: tool_call("submit_plan", bad) if "tools" in body else text(json.dumps(bad))
    )
    with pytest.raises(StructuredOutputError, match="unknown step 'missing'"):
        await make_plan(selecting(server), "q")
    assert len(server.requests) == 5


# -- analysis -------------------------------------------------------------------------------


async def test_analysis_reads_the_verdict_and_clamps_confidence(server: ScriptedOpenAI) -> None:
    verdict = {"achieved": True, "confidence": 1.7, "answer": "42", "reasoning": "all done"}
    server.script(tool_call("submit_analysis", verdict))
    analysis = await analyze_plan(
        selecting(server),
        "What is it?",
        [StepResult("s1", "compute", "42"), StepResult("s2", "check", "boom", failed=True)],
    )
    assert analysis.confidence == 1.0 and analysis.achieved
    assert analysis.answer == "42"
    prompt = server.requests[0]["messages"][1]["content"]
    assert "[s1] compute (done):\n42" in prompt and "[s2] check (FAILED)" in prompt


# -- routing --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "mode"),
    [
        ("hello!", Mode.SIMPLE),
        ("Thanks", Mode.SIMPLE),
        ("ありがとう", Mode.SIMPLE),
        ("What is 12*7?", Mode.SIMPLE),
        ("Research the market, compare the top vendors and write a report", Mode.COMPLEX),
    ],
)
async def test_keywords_route_before_any_model_call(
    server: ScriptedOpenAI, query: str, mode: Mode
) -> None:
    decision = await route(selecting(server), query)
    assert decision.mode is mode and decision.fast_path
    assert 0.0 <= decision.estimated_complexity <= 1.0
    assert server.requests == []


async def test_other_queries_ask_the_model(server: ScriptedOpenAI) -> None:
    assert fast_route("Find the cheapest flight to Osaka next week") is None
    server.script(
        tool_call("route_task", {"estimated_complexity": 0.55, "reasoning": "a few lookups"})
    )
    decision = await route(selecting(server), "Find the cheapest flight to Osaka next week")
    assert (decision.mode, decision.estimated_complexity) == (Mode.STANDARD, 0.55)
    assert not decision.fast_path and decision.usage.total_tokens > 0


@pytest.mark.parametrize(
    ("answer", "mode"),
    [
        ({"mode": "COMPLEX", "estimated_complexity": 0.2}, Mode.STANDARD),
        ({"mode": "SIMPLE", "estimated_complexity": 0.9}, Mode.STANDARD),
        ({"mode": "COMPLEX", "estimated_complexity": 0.6}, Mode.COMPLEX),
        ({"mode": "SIMPLE", "estimated_complexity": 0.4}, Mode.SIMPLE),
    ],
)
async def test_a_mode_its_own_estimate_contradicts_runs_standard(
    server: ScriptedOpenAI, answer: dict[str, Any], mode: Mode
) -> None:
    server.script(tool_call("route_task", answer))
    decision = await route(selecting(server), "Name the capital of France")
    assert decision.mode is mode
    assert decision.estimated_complexity == answer["estimated_complexity"]


async def test_routing_without_a_usable_answer_is_standard(server: ScriptedOpenAI) -> None:
    server.set_handler(lambda body: text("no idea"))
    decision = await route(selecting(server), "Find the cheapest flight to Osaka next week")
    assert decision.mode is Mode.STANDARD and decision.estimated_complexity == 0.5
    assert len(server.requests) == 5
