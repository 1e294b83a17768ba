"""The log-to-AG-UI translation on the runs the demo model does not make: cancelled, failed,
paused, an approval, a DAG's agents and an answer told again after a takeover."""

from __future__ import annotations

from typing import Any

from gateway.ag_ui.translate import AgUiTranslator, RunIds
from gateway.ag_ui.view import ClientView
from shuttle.envelope import ANSWER_RESTARTED

IDS = RunIds("thread-1", "run-1")


def log(*events: tuple[str, str, dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {"type": kind, "agent_id": agent, "seq": seq, "message": "", "payload": payload}
        for seq, (kind, agent, payload) in enumerate(events, start=1)
    ]


def translated(envelopes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    translator = AgUiTranslator(IDS)
    return [
        event.model_dump(by_alias=True, exclude_none=True, mode="json")
        for envelope in envelopes
        for event in translator.translate(envelope)
    ]


def assert_closed_before_the_end(events: list[dict[str, Any]]) -> None:
    """What @ag-ui/client's verifier requires of a run's last event."""
    open_steps: list[str] = []
    open_texts: list[str] = []
    for event in events[:-1]:
        if event["type"] == "STEP_STARTED":
            open_steps.append(event["stepName"])
        elif event["type"] == "STEP_FINISHED":
            open_steps.remove(event["stepName"])
        elif event["type"] == "TEXT_MESSAGE_START":
            open_texts.append(event["messageId"])
        elif event["type"] == "TEXT_MESSAGE_END":
            open_texts.remove(event["messageId"])
    assert open_steps == [] and open_texts == []


STARTED = ("WORKFLOW_STARTED", "", {"query": "q"})
THINKING = ("AGENT_THINKING", "agent-main", {"status": "start", "iteration": 1})


def test_a_cancelled_run_finishes_cancelled_with_everything_closed() -> None:
    events = translated(
        log(
            STARTED,
            THINKING,
            ("THREAD_MESSAGE_DELTA", "agent-main", {"delta": "par"}),
            ("WORKFLOW_CANCELLING", "", {"reason": "stop"}),
            ("WORKFLOW_CANCELLED", "", {"reason": "stop"}),
        )
    )
    assert events[-1]["type"] == "RUN_FINISHED"
    assert events[-1]["outcome"] == {"type": "cancelled"}
    assert events[-2]["snapshot"]["status"] == "cancelled"
    assert {"type": "CUSTOM", "name": "shuttle.WORKFLOW_CANCELLING"}.items() <= next(
        e for e in events if e["type"] == "CUSTOM"
    ).items()
    assert_closed_before_the_end(events)


def test_a_fatal_error_is_a_run_error_and_a_recovered_one_is_custom() -> None:
    events = translated(
        log(
            STARTED,
            THINKING,
            ("ERROR_OCCURRED", "agent-main", {"fatal": False, "error_type": "RATE_LIMIT"}),
            (
                "ERROR_OCCURRED",
                "agent-main",
                {"fatal": True, "error_type": "EXECUTOR_LOST", "error_message": "gone"},
            ),
        )
    )
    assert events[-1] == {"type": "RUN_ERROR", "message": "gone", "code": "EXECUTOR_LOST"}
    assert any(e.get("name") == "shuttle.ERROR_OCCURRED" for e in events)
    assert_closed_before_the_end(events)


def test_pause_and_approvals_reach_the_ui() -> None:
    events = translated(
        log(
            STARTED,
            ("WORKFLOW_PAUSED", "", {"checkpoint": "llm_call"}),
            ("WORKFLOW_RESUMED", "", {}),
            ("APPROVAL_REQUESTED", "agent-main", {"approval_id": "ap-1", "tool_name": "x"}),
        )
    )
    states = [e["snapshot"]["status"] for e in events if e["type"] == "STATE_SNAPSHOT"]
    assert states == ["running", "paused", "running"]
    [approval] = [e for e in events if e.get("name") == "shuttle.APPROVAL_REQUESTED"]
    assert approval["value"]["payload"]["approval_id"] == "ap-1"


def test_dag_agents_are_steps_holding_their_iterations() -> None:
    events = translated(
        log(
            STARTED,
            ("AGENT_STARTED", "agent-step-1", {}),
            ("AGENT_THINKING", "agent-step-1", {"status": "start", "iteration": 1}),
            ("AGENT_COMPLETED", "agent-step-1", {}),
            ("WORKFLOW_COMPLETED", "", {"result": "done"}),
        )
    )
    steps = [(e["type"], e["stepName"]) for e in events if e["type"].startswith("STEP_")]
    assert steps == [
        ("STEP_STARTED", "agent-step-1"),
        ("STEP_STARTED", "agent-step-1 iteration 1"),
        ("STEP_FINISHED", "agent-step-1 iteration 1"),
        ("STEP_FINISHED", "agent-step-1"),
    ]
    assert events[-1]["result"] == "done"


def test_an_answer_told_again_ends_the_partial_one_and_names_it() -> None:
    events = translated(
        log(
            STARTED,
            ("THREAD_MESSAGE_DELTA", "agent-main", {"delta": "Hal"}),
            ("STATUS_UPDATE", "agent-main", {"kind": ANSWER_RESTARTED}),
            ("THREAD_MESSAGE_DELTA", "agent-main", {"delta": "Hello"}),
            ("THREAD_MESSAGE_COMPLETED", "agent-main", {"content": "Hello"}),
        )
    )
    texts = [e for e in events if e["type"].startswith("TEXT_MESSAGE")]
    first, second = "run-1:answer:1", "run-1:answer:2"
    assert [(e["type"], e["messageId"]) for e in texts] == [
        ("TEXT_MESSAGE_START", first),
        ("TEXT_MESSAGE_CONTENT", first),
        ("TEXT_MESSAGE_END", first),
        ("TEXT_MESSAGE_START", second),
        ("TEXT_MESSAGE_CONTENT", second),
        ("TEXT_MESSAGE_END", second),
    ]
    [restarted] = [e for e in events if e.get("name") == "shuttle.answer_restarted"]
    assert restarted["value"]["discard_message_id"] == first


def test_reasoning_before_a_tool_call_is_a_reasoning_message() -> None:
    translator = AgUiTranslator(IDS)
    view = ClientView()
    done = {
        "status": "done",
        "iteration": 1,
        "reasoning": "I need the calculator",
        "next_action": "invoke_tool",
    }
    for envelope in log(STARTED, THINKING, ("AGENT_THINKING", "agent-main", done)):
        for event in translator.translate(envelope):
            view.apply(event)
    [reasoning] = [m for m in view.messages if m.role == "reasoning"]
    assert reasoning.content == "I need the calculator"
    assert view.reasoning_spans == [] and view.reasoning_messages == []
    assert view.steps == ["iteration 1"]
