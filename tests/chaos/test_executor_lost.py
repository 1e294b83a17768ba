"""Fault: the executor that owns a run is killed (SIGKILL) mid-run. Its lease lapses and the
events service ends the run with ERROR_OCCURRED (EXECUTOR_LOST) and STREAM_END, so the
browser's stream ends instead of hanging; the log loses and repeats nothing."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.models import HeldLoopCall
from tests.support.processes import restart_supervised
from tests.support.scripted_openai import ScriptedOpenAI
from tests.support.sse import LiveStream
from tests.support.stack import start_stack

pytestmark = pytest.mark.integration

LEASE_SECONDS = 2
SWEEP_SECONDS = 0.5


@pytest.fixture
def model() -> Iterator[tuple[HeldLoopCall, str]]:
    held = HeldLoopCall()
    server = ScriptedOpenAI(handler=held).start()
    yield held, server.base_url
    held.release()
    server.stop()


def test_a_killed_executor_ends_its_run_cleanly(
    tmp_path: Path, model: tuple[HeldLoopCall, str]
) -> None:
    held, base_url = model
    held.arm()
    stack = start_stack(
        tmp_path,
        base_url,
        extra_env={
            "SHUTTLE_RUN_LEASE_SECONDS": str(LEASE_SECONDS),
            "SHUTTLE_EVENTS_LEASE_SWEEP_SECONDS": str(SWEEP_SECONDS),
        },
    )
    try:
        created = httpx.post(
            f"{stack.gateway}/api/v1/tasks",
            json={"query": "What is 6*7?", "mode": "standard"},
            timeout=30,
        )
        assert created.status_code == 201, created.text
        workflow_id = created.json()["workflow_id"]
        stream = LiveStream(stack.gateway, f"/api/v1/stream/sse?workflow_id={workflow_id}")
        assert held.held.wait(60), "the run never called the model"
        stream.wait_for("AGENT_THINKING")

        executor = stack.supervisor.processes["executor"]
        killed_at = time.monotonic()
        executor.kill()
        executor.wait()
        held.release()  # the model call's client is gone
        frames = stream.join()

        print(
            f"\nkill -9 of the executor to STREAM_END on the SSE stream: "
            f"{stream.arrived('STREAM_END') - killed_at:.2f} s "
            f"(lease {LEASE_SECONDS} s, sweep every {SWEEP_SECONDS} s)"
        )
        assert stream.status == 200
        assert [frame.event for frame in frames][-2:] == ["ERROR_OCCURRED", "STREAM_END"]
        seqs = [int(frame.id or 0) for frame in frames]
        assert seqs == list(range(1, len(frames) + 1))  # gap-free, no repeat
        assert [frame.envelope["seq"] for frame in frames] == seqs
        lost = frames[-2].envelope["payload"]
        assert lost["error_type"] == "EXECUTOR_LOST"
        assert (lost["fatal"], lost["recoverable"]) == (True, False)
        assert "Retry the task" in lost["error_message"]
        assert lost["lost_owner"] in lost["error_message"]
        errors = [frame for frame in frames if frame.event == "ERROR_OCCURRED"]
        assert len(errors) == 1

        # What the user sees once an executor is back.
        restart_supervised(stack.supervisor, "executor")
        task = httpx.get(f"{stack.gateway}/api/v1/tasks/{workflow_id}", timeout=30).json()
        assert task["status"] == "failed", task
        assert "stopped responding" in task["error"]
        history = httpx.get(
            f"{stack.gateway}/api/v1/tasks/{workflow_id}/events", params={"limit": 1000}
        ).json()
        durable = [event["seq"] for event in history["events"]]
        assert durable == sorted(set(durable)) and durable[-1] == seqs[-1]
    finally:
        stack.stop()
