"""The ReAct channel dialect: translation rules, and the real stream over uvicorn."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gateway.routes.react_channels import ReactChannelTranslator
from shuttle.envelope import ANSWER_RESTARTED
from tests.gateway.conftest import AuthStack
from tests.support.sse import read_stream


def ev(type_: str, seq: int = 1, ts: str = "2026-01-01T00:00:00.000Z", **payload: Any):
    return {"type": type_, "seq": seq, "timestamp": ts, "message": "", "payload": payload}


def test_tool_loop_becomes_step_frames_with_elapsed_time() -> None:
    translator = ReactChannelTranslator()
    assert translator.translate(ev("AGENT_THINKING", status="start", iteration=1)) == [
        ("step", {"type": "thinking", "status": "start", "iteration": 1})
    ]
    invoked = translator.translate(
        ev("TOOL_INVOKED", tool_name="calc", tool_args={"x": 1}, iteration=1, call_id="c1")
    )
    assert invoked[0][1]["tool_args"] == {"x": 1} and invoked[0][1]["status"] == "start"
    done = translator.translate(
        ev(
            "TOOL_OBSERVATION",
            ts="2026-01-01T00:00:01.500Z",
            tool_name="calc",
            result="2",
            error="",
            iteration=1,
            duration_ms=20,
        )
    )
    assert done[0][1] | {} == {
        "type": "iteration",
        "status": "done",
        "iteration": 1,
        "tool_name": "calc",
        "observation": "2",
        "error": None,
        "iter_elapsed": 1.5,
        "call_id": "",
    }
    # Resumed after the iteration started: the tool's own duration stands in.
    resumed = ReactChannelTranslator().translate(
        ev("TOOL_OBSERVATION", iteration=3, duration_ms=250)
    )
    assert resumed[0][1]["iter_elapsed"] == 0.25


def test_answer_frames_and_resume_in_the_middle_of_an_answer() -> None:
    translator = ReactChannelTranslator()
    first = translator.translate(ev("THREAD_MESSAGE_DELTA", delta="Hel", index=0))
    assert [c for c, _ in first] == ["step", "answer", "answer"]
    assert first[0][1] == {"type": "answer", "status": "start"}
    assert translator.translate(ev("THREAD_MESSAGE_DELTA", delta="lo", index=1)) == [
        ("answer", {"status": "delta", "content": "lo"})
    ]
    assert translator.translate(ev("THREAD_MESSAGE_COMPLETED", content="Hello")) == [
        ("answer", {"status": "done", "content": "Hello"})
    ]
    # A client resuming after delta 0 gets no second start.
    mid = ReactChannelTranslator().translate(ev("THREAD_MESSAGE_DELTA", delta="lo", index=1))
    assert mid == [("answer", {"status": "delta", "content": "lo"})]
    # Deltas gone (durable replay): the whole answer arrives as one delta.
    whole = ReactChannelTranslator().translate(ev("THREAD_MESSAGE_COMPLETED", content="Hello"))
    assert [(c, p.get("status")) for c, p in whole] == [
        ("step", "start"),
        ("answer", "start"),
        ("answer", "delta"),
        ("answer", "done"),
    ]
    assert whole[2][1]["content"] == "Hello"


def test_compact_phase_inject_and_done() -> None:
    translator = ReactChannelTranslator()
    assert translator.translate(
        ev("WORKSPACE_UPDATED", kind="compact", original_messages=40, kept_messages=12)
    ) == [("compact", {"original_messages": 40, "kept_messages": 12})]
    assert translator.translate(ev("WORKSPACE_UPDATED", kind="file")) == []
    assert translator.translate(ev("STATUS_UPDATE", phase="selecting_tools", total_tools=30)) == [
        ("phase", {"phase": "selecting_tools", "total_tools": 30})
    ]
    assert translator.translate(ev("STATUS_UPDATE", kind="cycle_warning")) == []
    received = ev("MESSAGE_RECEIVED", content="also X")
    received["payload"]["from"] = "user"
    assert translator.translate(received) == [("inject", {"type": "inject", "content": "also X"})]
    translator.translate(ev("AGENT_COMPLETED", iterations=4))
    [(channel, done)] = translator.translate(
        ev(
            "WORKFLOW_COMPLETED",
            result="42",
            duration_ms=1500,
            input_tokens=10,
            output_tokens=5,
            total_tokens=15,
            total_cost_usd=0.001,
        )
    )
    assert channel == "done"
    assert done == {
        "answer": "42",
        "iterations": 4,
        "usage": {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15, "cost_usd": 0.001},
        "elapsed": 1.5,
    }
    assert ReactChannelTranslator().translate(ev("ERROR_OCCURRED", fatal=False)) == []
    [(_, failed)] = ReactChannelTranslator().translate(
        ev("ERROR_OCCURRED", fatal=True, error_message="model down")
    )
    assert failed["error"] == "model down"


@pytest.mark.integration
def test_react_channel_stream_from_a_real_run_and_its_resume(
    auth_stack: AuthStack, finished_a: str
) -> None:
    headers = {"Authorization": f"Bearer {auth_stack.key_a}"}
    path = f"/api/v1/tasks/{finished_a}/stream?dialect=fim"
    status, frames = read_stream(auth_stack.url, path, headers=headers)
    assert status == 200
    channels = [f.event for f in frames]
    assert channels[-1] == "done"
    assert set(channels) == {"step", "answer", "done"}
    steps = [json.loads(f.data) for f in frames if f.event == "step"]
    iteration = next(s for s in steps if s["type"] == "iteration" and s["status"] == "done")
    assert iteration["tool_name"] == "calculator" and iteration["observation"] == "42"
    assert iteration["iter_elapsed"] >= 0
    answer = [json.loads(f.data) for f in frames if f.event == "answer"]
    assert answer[0] == {"status": "start"} and answer[-1]["status"] == "done"
    streamed = "".join(a.get("content", "") for a in answer if a["status"] == "delta")
    assert streamed == answer[-1]["content"] == "[demo model] 6*7 = 42"
    done = json.loads(frames[-1].data)
    assert done["answer"] == streamed and done["iterations"] == 2
    assert done["usage"]["total_tokens"] > 0
    assert frames[0].retry is not None

    # Resume from the middle: exactly the frames after that id follow.
    ids = [f.id for f in frames]
    cut = next(i for i, f in enumerate(frames) if f.event == "answer" and f.id) + 1
    status, rest = read_stream(
        auth_stack.url, path, headers={**headers, "Last-Event-ID": str(ids[cut - 1])}
    )
    assert status == 200
    assert [(f.event, f.data) for f in rest] == [(f.event, f.data) for f in frames[cut:]]
    status, by_query = read_stream(auth_stack.url, f"{path}&last_event_id={ids[cut - 1]}", headers)
    assert [f.data for f in by_query] == [f.data for f in rest]


@pytest.mark.integration
def test_react_channels_are_the_default_and_fim_another_name_for_them(
    auth_stack: AuthStack, finished_a: str
) -> None:
    headers = {"Authorization": f"Bearer {auth_stack.key_a}"}
    streams = {
        query: read_stream(auth_stack.url, f"/api/v1/tasks/{finished_a}/stream{query}", headers)
        for query in ("?dialect=react", "?dialect=fim", "")
    }
    assert {status for status, _ in streams.values()} == {200}
    told = {
        query: [(f.event, f.data, f.id) for f in frames] for query, (_, frames) in streams.items()
    }
    assert told["?dialect=react"][-1][0] == "done"
    assert told["?dialect=fim"] == told["?dialect=react"] == told[""]


def test_a_restarted_answer_is_dropped_then_opened_again() -> None:
    translator = ReactChannelTranslator()
    translator.translate(ev("THREAD_MESSAGE_DELTA", delta="Hel", index=0))
    restart = ev("STATUS_UPDATE", kind=ANSWER_RESTARTED)
    assert translator.translate(restart) == [("answer", {"status": "restart"})]
    again = translator.translate(ev("THREAD_MESSAGE_DELTA", delta="Hi", index=0))
    assert [(c, p.get("status")) for c, p in again] == [
        ("step", "start"),
        ("answer", "start"),
        ("answer", "delta"),
    ]
    # A connection that begins at the signal is told too: its client may hold deltas from
    # an earlier connection.
    assert ReactChannelTranslator().translate(restart) == [("answer", {"status": "restart"})]
