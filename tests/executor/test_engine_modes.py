"""Every loop behaviour in both modes: native function calling and JSON actions.

One script drives both (tests/support/agent_model.py); what each loop call saw is recorded,
and thresholds come from the deployment's settings rather than being written down here.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from services.executor.adapters.planner import PlannerClient
from services.executor.engine.json_actions import REFORMAT_PROMPT, observation_message
from services.executor.engine.modes import JsonMode, Mode, NativeMode
from services.executor.engine.tokens import estimate_messages
from services.executor.policies.checklist import CHECKLIST_PROMPT
from services.executor.policies.context_guard import SUMMARY_PREFIX
from services.executor.policies.reflection import REFLECTION_PROMPT
from services.executor.runs import RunManager
from shuttle.grpc_client import open_channel
from shuttle.llm.openai_model import OpenAIModel
from shuttle.v1 import common_pb2
from tests.executor.conftest import TENANT, Backends, agent_defaults, first, of_type, types_of
from tests.support.agent_model import AgentModel, Step, answer, calc, call, raw
from tests.support.scripted_openai import ScriptedOpenAI
from tests.support.stack import free_ports

DEFAULTS = agent_defaults()
QUIET = {"completion_check": False, "reflection_interval": 0, "cycle_threshold": 0}
"""Guards off, for tests about something else."""


@pytest.fixture(params=["native", "json"])
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def server() -> Iterator[ScriptedOpenAI]:
    started = ScriptedOpenAI().start()
    yield started
    started.stop()


def manager(
    backends: Backends, server: ScriptedOpenAI, script: AgentModel, mode: str, **overrides: Any
) -> RunManager:
    server.set_handler(script)
    llm = OpenAIModel(server.base_url, "test-key", "scripted-model", 10.0, 0)
    return backends.run_manager(llm, use_native_tools=mode == "native", **overrides)


def contents(messages: list[dict[str, Any]]) -> list[str]:
    return [str(m.get("content") or "") for m in messages]


async def window_for(backends: Backends, mode: str, query: str, room: int) -> int:
    """A context window whose budget is the fixed prompt (system, tools, query) plus `room`."""
    tools = await backends.tools.list_tools(TENANT)
    chosen: Mode = NativeMode() if mode == "native" else JsonMode()
    fixed = [
        {"role": "system", "content": chosen.system_prompt(tools)},
        {"role": "user", "content": query},
    ]
    overhead = estimate_messages(fixed, chosen.tool_schemas(tools))
    return int((overhead + room) / DEFAULTS.context_ratio) + 1


def kinds(events: list[dict[str, Any]]) -> list[str]:
    return [e["payload"].get("kind", "") for e in of_type(events, "STATUS_UPDATE")]


async def test_a_tool_call_and_its_result_in_each_modes_shape(
    backends: Backends, server: ScriptedOpenAI, mode: str
) -> None:
    script = AgentModel(calc("12*7"), answer("It is 84."), synthesis="12*7 = **84**")
    events = await backends.run_to_end(manager(backends, server, script, mode), "What is 12*7?")

    assert first(events, "TOOL_OBSERVATION")["payload"]["result"] == "84"
    assert first(events, "WORKFLOW_COMPLETED")["payload"]["result"] == "12*7 = **84**"
    first_call, second_call = script.loop_calls
    after_tool = script.saw(2)
    if mode == "native":
        assert "calculator" in [t["function"]["name"] for t in first_call["tools"]]
        call = {"role": "tool", "tool_call_id": "agent-main.1.0", "content": "84"}
        assert after_tool[-1] == call
        assert after_tool[-2]["tool_calls"][0]["id"] == "agent-main.1.0"
    else:
        assert "tools" not in first_call and "tools" not in second_call
        system = first_call["messages"][0]["content"]
        assert "- calculator:" in system and '"expression"' in system
        assert after_tool[-1] == {
            "role": "user",
            "content": observation_message("calculator", "84"),
        }
        assert after_tool[-2]["role"] == "assistant" and '"tool_call"' in after_tool[-2]["content"]
    done = [e for e in of_type(events, "AGENT_THINKING") if e["payload"]["status"] == "done"]
    assert [e["payload"]["next_action"] for e in done] == ["invoke_tool", "final_answer"]
    assert [e["payload"]["phase"] for e in of_type(events, "LLM_OUTPUT")] == [
        "tool_loop",
        "tool_loop",
        "answer",
    ]


async def test_unknown_tools_and_failing_tools_become_observations(
    backends: Backends, server: ScriptedOpenAI, mode: str
) -> None:
    script = AgentModel(call("web_search", q="news"), calc("1/0"), answer("Could not."))
    events = await backends.run_to_end(manager(backends, server, script, mode), "Try")

    observations = [e["payload"] for e in of_type(events, "TOOL_OBSERVATION")]
    assert [bool(o["error"]) for o in observations] == [True, True]
    assert "Unknown tool 'web_search'" in observations[0]["result"]
    assert "calculator" in observations[0]["result"]
    assert "zero" in observations[1]["result"]
    assert len(script.loop_calls) == 3
    assert "zero" in contents(script.saw(3))[-1]
    assert types_of(events)[-2:] == ["WORKFLOW_COMPLETED", "STREAM_END"]


async def test_max_iterations_ends_with_a_summary_of_the_tools(
    backends: Backends, server: ScriptedOpenAI, mode: str
) -> None:
    script = AgentModel(calc("1+1"), calc("1/0"), calc("3+3"), answer("never asked"))
    runs = manager(backends, server, script, mode, max_iterations=3, **QUIET)
    events = await backends.run_to_end(runs, "Loop")

    assert len(script.loop_calls) == 3
    draft = script.synthesis_calls[0]["messages"][1]["content"]
    assert "could not reach a final answer within the allowed number of steps" in draft
    assert "- calculator: succeeded" in draft and "- calculator: failed" in draft
    assert first(events, "AGENT_COMPLETED")["payload"]["iterations"] == 3


async def test_self_reflection_after_every_n_real_tool_calls(
    backends: Backends, server: ScriptedOpenAI, mode: str
) -> None:
    interval = DEFAULTS.reflection_interval
    script = AgentModel(*[calc(f"{i}+1") for i in range(interval)], answer("Done."))
    runs = manager(backends, server, script, mode, completion_check=False, cycle_threshold=0)
    events = await backends.run_to_end(runs, "Add things")

    for n in range(1, interval + 1):
        assert REFLECTION_PROMPT not in contents(script.saw(n))
    after = script.saw(interval + 1)
    assert after[-1] == {"role": "user", "content": REFLECTION_PROMPT}
    assert after[-2]["role"] == ("tool" if mode == "native" else "user")
    assert kinds(events) == ["self_reflection"]


async def test_native_reflection_waits_for_every_result_of_a_parallel_batch(
    backends: Backends, server: ScriptedOpenAI
) -> None:
    interval = DEFAULTS.reflection_interval
    batch = Step(calls=[("calculator", {"expression": f"{i}*2"}) for i in range(interval)])
    script = AgentModel(batch, answer("Done."))
    runs = manager(backends, server, script, "native", completion_check=False)
    await backends.run_to_end(runs, "Double things")

    after = script.saw(2)
    assert [m["role"] for m in after[-interval - 2 :]] == [
        "assistant",
        *["tool"] * interval,
        "user",
    ]
    assert after[-1]["content"] == REFLECTION_PROMPT


async def test_identical_calls_get_a_cycle_warning_and_the_count_resets_per_run(
    backends: Backends, server: ScriptedOpenAI, mode: str
) -> None:
    threshold = DEFAULTS.cycle_threshold
    steps = [calc("2+2") for _ in range(threshold)]
    script = AgentModel(*steps, answer("4"), *steps, answer("4"))
    runs = manager(backends, server, script, mode, completion_check=False, reflection_interval=0)
    first_run = await backends.run_to_end(runs, "2+2, really sure?")
    second_run = await backends.run_to_end(runs, "2+2 again")

    for offset in (0, threshold + 1):
        for n in range(1, threshold + 1):
            assert not any("identical arguments" in c for c in contents(script.saw(offset + n)))
        warned = contents(script.saw(offset + threshold + 1))[-1]
        assert f"`calculator` with identical arguments {threshold} times" in warned
    for events in (first_run, second_run):
        assert kinds(events) == ["cycle_warning"]
        assert first(events, "STATUS_UPDATE")["payload"]["tool_name"] == "calculator"


async def test_the_completion_checklist_fires_once_after_enough_tools(
    backends: Backends, server: ScriptedOpenAI, mode: str
) -> None:
    needed = DEFAULTS.completion_check_min_tools
    steps = [calc(f"{i}+10") for i in range(needed)]
    script = AgentModel(*steps, answer("First try."), answer("Checked."), synthesis="Checked.")
    runs = manager(backends, server, script, mode, reflection_interval=0, cycle_threshold=0)
    events = await backends.run_to_end(runs, "Sum up")

    assert len(script.loop_calls) == needed + 2
    checked = script.saw(needed + 2)
    assert checked[-1] == {"role": "user", "content": CHECKLIST_PROMPT}
    assert "First try." in str(checked[-2]["content"])
    assert kinds(events) == ["completion_check"]
    assert first(events, "WORKFLOW_COMPLETED")["payload"]["result"] == "Checked."


async def test_no_checklist_below_the_tool_threshold(
    backends: Backends, server: ScriptedOpenAI, mode: str
) -> None:
    needed = DEFAULTS.completion_check_min_tools
    steps = [calc(f"{i}+10") for i in range(needed - 1)]
    script = AgentModel(*steps, answer("Done."))
    runs = manager(backends, server, script, mode, reflection_interval=0, cycle_threshold=0)
    events = await backends.run_to_end(runs, "Sum up")
    assert len(script.loop_calls) == needed
    assert kinds(events) == []


@pytest.mark.parametrize("summary_works", [True, False])
async def test_the_context_guard_compacts_and_keeps_the_query(
    backends: Backends, server: ScriptedOpenAI, mode: str, summary_works: bool
) -> None:
    # Results of ~850 digits (~215 tokens): a window with room for about three of them
    # beyond the fixed prompt overflows after a few calls.
    steps = [calc(f"7**{1000 - i}") for i in range(6)]
    script = AgentModel(
        *steps,
        answer("Big."),
        summary="7**1000 and 7**999 were computed." if summary_works else None,
    )
    query = "Compute some large powers of seven"
    context_tokens = await window_for(backends, mode, query, room=700)
    runs = manager(
        backends,
        server,
        script,
        mode,
        **QUIET,
        context_tokens=context_tokens,
        compact_keep_recent=2,
    )
    events = await backends.run_to_end(runs, query)
    budget = int(context_tokens * DEFAULTS.context_ratio)

    compactions = [e["payload"] for e in of_type(events, "WORKSPACE_UPDATED")]
    assert compactions and all(c["kind"] == "compact" for c in compactions)
    assert {c["method"] for c in compactions} == {"summary" if summary_works else "truncate"}
    assert all(c["kept_messages"] < c["original_messages"] for c in compactions)
    assert all(c["tokens_after"] <= budget < c["tokens_before"] for c in compactions)
    for body in script.loop_calls:
        messages = body["messages"]
        assert messages[0]["role"] == "system" and messages[1]["content"] == query
        assert estimate_messages(messages, body.get("tools", [])) <= budget
    summarised = [
        b
        for b in script.loop_calls
        if any(c.startswith(SUMMARY_PREFIX) for c in contents(b["messages"]))
    ]
    if summary_works:
        assert summarised
        hint = script.summary_calls[0]["messages"][0]["content"]
        assert "tool-using task" in hint
        phases = [e["payload"]["phase"] for e in of_type(events, "LLM_OUTPUT")]
        assert phases.count("compact") == len(script.summary_calls)
    else:
        assert not summarised and script.summary_calls
    # Each summary call is announced like any other model call, before it is made.
    announced = [e for e in of_type(events, "LLM_PROMPT") if e["payload"]["phase"] == "compact"]
    assert len(announced) == len(script.summary_calls)
    assert all(e["payload"]["messages"] == 2 for e in announced)
    assert types_of(events)[-2:] == ["WORKFLOW_COMPLETED", "STREAM_END"]


async def test_a_token_budget_warns_once_then_ends_gracefully_with_what_was_found(
    backends: Backends, server: ScriptedOpenAI, mode: str
) -> None:
    script = AgentModel(default=calc("6*7"))
    runs = manager(backends, server, script, mode, **QUIET)
    events = await backends.run_to_end(runs, "Keep going", budget_tokens=2_000)

    (warning,) = of_type(events, "BUDGET_THRESHOLD")
    assert warning["payload"]["tokens_budget"] == 2_000
    assert warning["payload"]["threshold_percent"] == DEFAULTS.budget_warn_percent
    assert warning["payload"]["usage_percent"] >= DEFAULTS.budget_warn_percent
    (exceeded,) = [e for e in of_type(events, "ERROR_OCCURRED")]
    assert exceeded["payload"]["error_type"] == "BUDGET_EXCEEDED"
    assert exceeded["payload"]["fatal"] is False
    assert exceeded["payload"]["tokens_used"] >= 2_000
    assert warning["seq"] < exceeded["seq"]
    answer_text = first(events, "THREAD_MESSAGE_COMPLETED")["payload"]["content"]
    assert "token budget of 2000 tokens was used up" in answer_text
    assert "calculator" in answer_text and "42" in answer_text
    assert not script.synthesis_calls  # no more tokens spent on a synthesis
    workflow = await backends.workflow(events[0]["workflow_id"])
    assert workflow.status == common_pb2.WORKFLOW_STATUS_COMPLETED


async def test_json_mode_asks_once_to_reformat_then_takes_the_raw_reply(
    backends: Backends, server: ScriptedOpenAI
) -> None:
    script = AgentModel(raw("The answer is 4"), raw("Really, it is 4."))
    events = await backends.run_to_end(manager(backends, server, script, "json"), "2+2?")

    assert script.saw(2)[-2:] == [
        {"role": "assistant", "content": "The answer is 4"},
        {"role": "user", "content": REFORMAT_PROMPT},
    ]
    assert len(script.loop_calls) == 2
    draft = script.synthesis_calls[0]["messages"][1]["content"]
    assert "Draft answer from the agent:\nReally, it is 4." in draft
    assert first(events, "AGENT_COMPLETED")["payload"]["iterations"] == 2


async def test_json_mode_recovers_after_one_reformat(
    backends: Backends, server: ScriptedOpenAI
) -> None:
    script = AgentModel(raw("calling the calculator now"), calc("5*5"), answer("25"))
    events = await backends.run_to_end(manager(backends, server, script, "json"), "5*5?")
    assert first(events, "TOOL_OBSERVATION")["payload"]["result"] == "25"
    assert REFORMAT_PROMPT not in contents(script.saw(3))[-1]
    assert len(script.loop_calls) == 3


async def test_reasoning_content_stands_in_for_an_empty_reasoning_field(
    backends: Backends, server: ScriptedOpenAI, mode: str
) -> None:
    step = calc("3*3")
    step.reasoning_content = "Multiplying is all it takes."
    script = AgentModel(step, answer("9"))
    events = await backends.run_to_end(manager(backends, server, script, mode), "3*3?")
    done = [e for e in of_type(events, "AGENT_THINKING") if e["payload"]["status"] == "done"]
    assert done[0]["payload"]["reasoning"] == "Multiplying is all it takes."


async def test_many_tools_go_through_the_planners_selection(
    backends: Backends, server: ScriptedOpenAI, mode: str
) -> None:
    # The deployment's threshold is lowered so that the built-in catalog counts as "many".
    names = [t.name for t in await backends.tools.list_tools(TENANT)]
    script = AgentModel(calc("1+2"), answer("3"))
    runs = manager(backends, server, script, mode, tool_selection_threshold=0)
    events = await backends.run_to_end(runs, "1+2?")

    selecting, selected = of_type(events, "STATUS_UPDATE")
    assert selecting["payload"] == {
        "status": "selecting_tools",
        "details": f"Selecting tools among {len(names)}",
        "phase": "selecting_tools",
        "total_tools": len(names),
    }
    assert selected["payload"]["phase"] == "tools_selected"
    chosen = selected["payload"]["selected"]
    assert "calculator" in chosen and set(chosen) <= set(names)
    if mode == "native":
        offered = [t["function"]["name"] for t in script.loop_calls[0]["tools"]]
        assert offered == chosen
    assert first(events, "TOOL_OBSERVATION")["payload"]["result"] == "3"


async def test_a_failed_selection_keeps_every_tool(
    backends: Backends, server: ScriptedOpenAI
) -> None:
    (closed_port,) = free_ports(1)
    channel = open_channel(f"127.0.0.1:{closed_port}")
    backends.channels.append(channel)
    unreachable = PlannerClient(channel)
    names = [t.name for t in await backends.tools.list_tools(TENANT)]
    script = AgentModel(calc("1+2"), answer("3"))
    server.set_handler(script)
    llm = OpenAIModel(server.base_url, "test-key", "scripted-model", 10.0, 0)
    runs = backends.run_manager(llm, selector=unreachable, tool_selection_threshold=0)
    events = await backends.run_to_end(runs, "1+2?")

    selected = of_type(events, "STATUS_UPDATE")[1]["payload"]
    assert selected == {
        "status": "tools_selected",
        "details": f"Offering {len(names)} of {len(names)} tools",
        "phase": "tools_selected",
        "selected": names,
        "fell_back": True,
        "usage": {"input_tokens": 0, "output_tokens": 0, "total_tokens": 0, "cached_tokens": 0},
        "cost_usd": 0.0,
    }
    assert [t["function"]["name"] for t in script.loop_calls[0]["tools"]] == names


async def test_tool_arguments_holding_half_a_surrogate_pair_reach_the_tool(
    backends: Backends, server: ScriptedOpenAI, mode: str
) -> None:
    # Half a pair, escaped in the model's JSON: parsed, it is a str that UTF-8 cannot encode.
    script = AgentModel(calc("2+2 \ud83d"), answer("Could not."))
    events = await backends.run_to_end(manager(backends, server, script, mode, **QUIET), "Try")

    assert types_of(events)[-2:] == ["WORKFLOW_COMPLETED", "STREAM_END"]
    # Both modes hand the tool what the model sent, escaped on the wire as it came.
    assert first(events, "TOOL_INVOKED")["payload"]["tool_args"] == {"expression": "2+2 \ud83d"}
    observation = first(events, "TOOL_OBSERVATION")["payload"]["result"]
    assert observation.startswith("Error: calculator: could not parse '2+2 \\ud83d'")
