"""The ReAct loop end to end inside one process: real events and tools services over gRPC,
the real `openai` client against a scripted OpenAI-compatible server."""

from __future__ import annotations

import json

from services.executor.engine.synthesis import SYNTHESIZER_PROMPT
from shuttle.events_client.sizes import EVENT_MAX_BYTES
from shuttle.llm.demo import DemoModel
from shuttle.llm.openai_model import OpenAIModel
from shuttle.v1 import common_pb2
from tests.executor.conftest import Backends, first, types_of
from tests.support.scripted_openai import Reply, ScriptedOpenAI, error, text, tool_call


def openai_model(server: ScriptedOpenAI, retries: int = 0) -> OpenAIModel:
    return OpenAIModel(
        server.base_url, "test-key", "scripted-model", 10.0, retries, retry_base_seconds=0.01
    )


async def test_native_loop_runs_the_tool_then_streams_the_answer(
    backends: Backends, model: ScriptedOpenAI
) -> None:
    model.script(
        tool_call("calculator", {"expression": "12*7"}, "call_a"),
        text("12*7 is 84."),
        text("The answer is 84.", chunks=["The ", "answer ", "is ", "84."]),
    )
    events = await backends.run_to_end(backends.run_manager(openai_model(model)), "What is 12*7?")

    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert types_of(events) == [
        "WORKFLOW_STARTED",
        "AGENT_STARTED",
        "AGENT_THINKING",
        "LLM_PROMPT",
        "LLM_OUTPUT",
        "AGENT_THINKING",
        "TOOL_INVOKED",
        "TOOL_OBSERVATION",
        "AGENT_THINKING",
        "LLM_PROMPT",
        "LLM_OUTPUT",
        "AGENT_THINKING",
        "LLM_PROMPT",
        *["THREAD_MESSAGE_DELTA"] * 4,
        "THREAD_MESSAGE_COMPLETED",
        "LLM_OUTPUT",
        "AGENT_COMPLETED",
        "WORKFLOW_COMPLETED",
        "STREAM_END",
    ]
    invoked, observed = first(events, "TOOL_INVOKED"), first(events, "TOOL_OBSERVATION")
    assert invoked["message"] == "calculator: 12*7"
    assert invoked["payload"]["tool_args"] == {"expression": "12*7"}
    assert observed["payload"] | {"duration_ms": 0} == {
        "tool_name": "calculator",
        "result": "84",
        "duration_ms": 0,
        "truncated": False,
        "call_id": "agent-main.1.0",
        "iteration": 1,
        "error": "",
        "blocked": False,
    }
    llm_output = first(events, "LLM_OUTPUT")["payload"]
    assert llm_output["model"] == "scripted-model" and llm_output["provider"] == "openai"
    assert llm_output["usage"]["output_tokens"] == 7
    deltas = [e["payload"]["delta"] for e in events if e["type"] == "THREAD_MESSAGE_DELTA"]
    assert deltas == ["The ", "answer ", "is ", "84."]
    assert first(events, "THREAD_MESSAGE_COMPLETED")["payload"]["content"] == "The answer is 84."
    completed = first(events, "WORKFLOW_COMPLETED")["payload"]
    assert completed["result"] == "The answer is 84."
    assert completed["tools_invoked"] == 1 and completed["agents_used"] == 1
    assert completed["total_tokens"] > 0

    # What the model received: tools offered natively, the tool result right after the call,
    # and a synthesis call that carries the trace.
    loop_call, after_tool, synthesis = model.requests
    offered = [t["function"]["name"] for t in loop_call["tools"]]
    assert offered[0] == "calculator"
    assert "python_exec" not in offered  # off unless enabled
    # Shuttle's own call id, not the model's: a re-issued model call yields the same one.
    assert after_tool["messages"][-2]["tool_calls"][0]["id"] == "agent-main.1.0"
    assert after_tool["messages"][-1] == {
        "role": "tool",
        "tool_call_id": "agent-main.1.0",
        "content": "84",
    }
    assert first(events, "LLM_OUTPUT")["payload"]["tool_calls"][0]["id"] == "call_a"
    assert synthesis["stream"] is True and "tools" not in synthesis
    assert synthesis["messages"][0]["content"] == SYNTHESIZER_PROMPT
    assert 'calculator({"expression": "12*7"}) → 84' in synthesis["messages"][1]["content"]


async def test_parallel_calls_of_one_response_all_run_and_answer_in_order(
    backends: Backends, model: ScriptedOpenAI
) -> None:
    model.script(
        Reply(
            tool_calls=[
                ("call_1", "calculator", {"expression": "2+2"}),
                ("call_2", "calculator", {"expression": "3*3"}),
            ]
        ),
        text("4 and 9"),
        text("4 and 9."),
    )
    events = await backends.run_to_end(backends.run_manager(openai_model(model)), "2+2 and 3*3?")
    results = {
        e["payload"]["call_id"]: e["payload"]["result"]
        for e in events
        if e["type"] == "TOOL_OBSERVATION"
    }
    assert results == {"agent-main.1.0": "4", "agent-main.1.1": "9"}
    tool_messages = [m for m in model.requests[1]["messages"] if m["role"] == "tool"]
    assert [(m["tool_call_id"], m["content"]) for m in tool_messages] == [
        ("agent-main.1.0", "4"),
        ("agent-main.1.1", "9"),
    ]
    assert model.requests[1]["messages"][-3]["role"] == "assistant"


async def test_unknown_tools_and_bad_arguments_become_observations_and_the_loop_goes_on(
    backends: Backends, model: ScriptedOpenAI
) -> None:
    model.script(
        tool_call("web_search", {"q": "news"}, "call_x"),
        Reply(tool_calls=[("call_y", "calculator", {"expr": "1+1"})]),
        tool_call("calculator", {"expression": "1/0"}, "call_z"),
        text("I could not compute it."),
        text("Sorry, that could not be computed."),
    )
    events = await backends.run_to_end(backends.run_manager(openai_model(model)), "Try tools")

    observations = [e["payload"] for e in events if e["type"] == "TOOL_OBSERVATION"]
    assert [o["error"] != "" for o in observations] == [True, True, True]
    assert "calculator" in observations[0]["result"]  # lists what is available
    assert "expression" in observations[1]["result"]
    assert "zero" in observations[2]["result"]
    assert types_of(events)[-2:] == ["WORKFLOW_COMPLETED", "STREAM_END"]
    assert first(events, "WORKFLOW_COMPLETED")["payload"]["tools_invoked"] == 3
    workflow = await backends.workflow(events[0]["workflow_id"])
    assert workflow.status == common_pb2.WORKFLOW_STATUS_COMPLETED
    assert workflow.result == "Sorry, that could not be computed."


async def test_lone_surrogates_from_the_model_become_replacement_characters(
    backends: Backends, model: ScriptedOpenAI
) -> None:
    # JSON escapes of half a surrogate pair, as an endpoint built on UTF-16 strings may send:
    # each would fail the events that carry it, and the next request's body.
    model.script(
        Reply(
            content="thinking \ud83d", tool_calls=[("call_s", "calculator", {"expression": "1+1"})]
        ),
        text("done \udce9"),
        text("", chunks=["caf\u00e9 \ud83d", "\ude00 and \udce9"]),
    )
    events = await backends.run_to_end(backends.run_manager(openai_model(model)), "Try it")

    assert types_of(events)[-2:] == ["WORKFLOW_COMPLETED", "STREAM_END"]
    outputs = [e["payload"]["output"] for e in events if e["type"] == "LLM_OUTPUT"]
    assert outputs == ["thinking \ufffd", "done \ufffd", "caf\u00e9 \U0001f600 and \ufffd"]
    deltas = [e["payload"]["delta"] for e in events if e["type"] == "THREAD_MESSAGE_DELTA"]
    assert deltas == ["caf\u00e9 ", "\U0001f600 and \ufffd"]
    # The second request carried the first reply back, made valid.
    assert model.requests[1]["messages"][-2]["content"] == "thinking \ufffd"


async def test_a_reply_of_megabytes_is_cut_to_what_the_log_takes_and_the_run_ends(
    backends: Backends, model: ScriptedOpenAI
) -> None:
    # Each of these events would be over the log's 4 MiB batch limit on its own, and a
    # refused batch would leave the run's subscribers waiting for ever.
    big = "x" * 5_000_000
    model.script(
        Reply(content=big, tool_calls=[("call_s", "calculator", {"expression": "1+1"})]),
        text("done"),
        text("", chunks=["answer ", big, big]),
    )
    events = await backends.run_to_end(backends.run_manager(openai_model(model)), "Try it")

    assert types_of(events)[-2:] == ["WORKFLOW_COMPLETED", "STREAM_END"]
    assert first(events, "TOOL_OBSERVATION")["payload"]["result"] == "2"
    output = first(events, "LLM_OUTPUT")["payload"]
    assert output["truncated"] is True
    assert output["output"].endswith("…[truncated: 5,000,000 characters in all]")
    deltas = [e["payload"]["delta"] for e in events if e["type"] == "THREAD_MESSAGE_DELTA"]
    assert len(deltas) == 3 and deltas[0] == "answer "
    assert all(len(json.dumps(e["payload"])) <= EVENT_MAX_BYTES for e in events)


async def test_a_batch_the_log_refuses_ends_the_run_with_the_reason(
    backends: Backends, model: ScriptedOpenAI
) -> None:
    # A sink that cuts nothing: the batch the log refuses is the run's last, and the same
    # producer then tells its subscribers why. One event per batch, over the log's 4 MiB
    # and under gRPC's 16 MiB message limit, whatever queues up together.
    model.script(text("x" * 4_500_000))
    uncut = {"event_max_bytes": 2**40, "batch_max_bytes": 8 * 1024 * 1024}
    runs = backends.run_manager(openai_model(model), sink_options=uncut)
    events = await backends.run_to_end(runs, "Try it")

    assert types_of(events)[-2:] == ["ERROR_OCCURRED", "STREAM_END"]
    failure = first(events, "ERROR_OCCURRED")["payload"]
    assert failure["error_type"] == "INTERNAL" and failure["fatal"] is True
    assert "at most 4194304 (4 MiB) are allowed per append" in failure["error_message"]
    workflow = await backends.workflow(events[0]["workflow_id"])
    assert workflow.status == common_pb2.WORKFLOW_STATUS_FAILED


async def test_a_model_that_keeps_failing_ends_the_run_with_a_fatal_error(
    backends: Backends, model: ScriptedOpenAI
) -> None:
    model.script(*[error(500, "upstream exploded")] * 3)
    runs = backends.run_manager(openai_model(model, retries=2))
    events = await backends.run_to_end(runs, "What is 1+1?")

    assert types_of(events)[-2:] == ["ERROR_OCCURRED", "STREAM_END"]
    failure = [e for e in events if e["type"] == "ERROR_OCCURRED"][-1]["payload"]
    assert failure["error_type"] == "LLM_ERROR" and failure["fatal"] is True
    assert "upstream exploded" in failure["error_message"]
    assert len(model.requests) == 3  # the first try and two retries
    assert "WORKFLOW_COMPLETED" not in types_of(events)
    workflow = await backends.workflow(events[0]["workflow_id"])
    assert workflow.status == common_pb2.WORKFLOW_STATUS_FAILED
    assert "upstream exploded" in workflow.error


async def test_the_loop_stops_at_max_iterations_with_a_summary(
    backends: Backends, model: ScriptedOpenAI
) -> None:
    model.script(
        tool_call("calculator", {"expression": "1+1"}, "c1"),
        tool_call("calculator", {"expression": "2+2"}, "c2"),
        tool_call("calculator", {"expression": "3+3"}, "c3"),
        text("Summary of partial work."),
    )
    events = await backends.run_to_end(
        backends.run_manager(openai_model(model), max_iterations=3), "Loop"
    )
    assert sum(t == "TOOL_INVOKED" for t in types_of(events)) == 3
    draft = model.requests[-1]["messages"][1]["content"]
    assert "could not reach a final answer within the allowed number of steps" in draft
    assert first(events, "AGENT_COMPLETED")["payload"]["iterations"] == 3


async def test_a_failed_synthesis_falls_back_to_the_loop_answer(
    backends: Backends, model: ScriptedOpenAI
) -> None:
    model.script(text("Plain answer from the loop."), error(400, "streaming refused"))
    events = await backends.run_to_end(backends.run_manager(openai_model(model)), "Hello")
    error_event = first(events, "ERROR_OCCURRED")["payload"]
    assert error_event["fatal"] is False and error_event["recoverable"] is True
    answer = first(events, "THREAD_MESSAGE_COMPLETED")["payload"]["content"]
    assert answer == "Plain answer from the loop."
    assert first(events, "WORKFLOW_COMPLETED")["payload"]["result"] == answer


async def test_many_answer_tokens_arrive_complete_and_in_order(
    backends: Backends, model: ScriptedOpenAI
) -> None:
    words = [f"w{i} " for i in range(300)]
    model.script(text("done"), text("".join(words), chunks=words))
    events = await backends.run_to_end(backends.run_manager(openai_model(model)), "Talk")
    deltas = [e for e in events if e["type"] == "THREAD_MESSAGE_DELTA"]
    assert [d["payload"]["delta"] for d in deltas] == words
    assert [d["payload"]["index"] for d in deltas] == list(range(300))
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))


async def test_the_demo_model_runs_offline_and_labels_itself(backends: Backends) -> None:
    events = await backends.run_to_end(backends.run_manager(DemoModel()), "What is (3+4)^2?")
    assert first(events, "TOOL_INVOKED")["payload"]["tool_args"] == {"expression": "(3+4)**2"}
    answer = first(events, "THREAD_MESSAGE_COMPLETED")["payload"]["content"]
    assert answer == "[demo model] (3+4)**2 = 49"
    assert first(events, "LLM_OUTPUT")["payload"]["provider"] == "demo"
    assert json.loads(json.dumps(events))  # every payload is plain JSON
