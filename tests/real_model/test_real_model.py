"""Gemma 3 270M behind llama.cpp's server, through the whole system: every run ends cleanly
within its deadline, and no model call waits longer than its bound, whatever the model sends.

What each run came to is saved under var/real-model/ for docs/real-models.md
(`python -m tests.real_model.report --write`).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from shuttle.client import ShuttleClient
from shuttle.client.models import Event
from tests.real_model.conftest import (
    LLM_TIMEOUT_SECONDS,
    MAX_OUTPUT_TOKENS,
    RUN_TIMEOUT_SECONDS,
)
from tests.real_model.llama_server import LlamaServer
from tests.real_model.model_calls import ModelCallRecorder
from tests.real_model.outcome import TERMINAL, outcome_of
from tests.real_model.tasks import TASKS, Models, RealTask
from tests.support.stack import Stack

pytestmark = pytest.mark.real_model

ANSWER_GRACE_SECONDS = 30.0
"""What an answer may take after the deadline (engine/deadline.py)."""
SLACK_SECONDS = 10.0
"""Room for the processes' own work around the bounds (starting, closing, two cores)."""


def follow(client: ShuttleClient, workflow_id: str, interrupt: str) -> list[Event]:
    events: list[Event] = []
    for event in client.events(workflow_id):
        events.append(event)
        if interrupt and event.type == "LLM_PROMPT":
            assert client.interrupt(workflow_id, interrupt)
            interrupt = ""
    return events


@pytest.mark.timeout(RUN_TIMEOUT_SECONDS + ANSWER_GRACE_SECONDS + 120)
@pytest.mark.parametrize("task", TASKS, ids=[t.name for t in TASKS])
def test_a_real_model_run_ends_cleanly_within_its_bounds(
    task: RealTask,
    stack_for: Callable[[Models], Stack],
    recorder: ModelCallRecorder,
    llama: LlamaServer,
) -> None:
    stack = stack_for(task.models)
    began = time.time()
    with ShuttleClient(stack.gateway, timeout=60) as client:
        workflow_id = client.start_task(task.query, mode=task.mode)
        events = follow(client, workflow_id, task.interrupt)
    calls = recorder.since(began)
    outcome = outcome_of(task, events, calls)
    outcome.save()

    assert llama.alive(), llama.log_tail()
    assert [e.seq for e in events] == list(range(1, len(events) + 1)), "gap-free"
    assert events[-1].type == "STREAM_END"
    assert outcome.ended == "WORKFLOW_COMPLETED", outcome
    assert outcome.answer.strip(), "never an empty answer"
    assert outcome.seconds <= RUN_TIMEOUT_SECONDS + ANSWER_GRACE_SECONDS + SLACK_SECONDS
    assert calls, "the model was asked"
    for call in calls:
        assert call.max_tokens is not None and call.max_tokens <= MAX_OUTPUT_TOKENS
        assert call.seconds <= LLM_TIMEOUT_SECONDS + SLACK_SECONDS, call.body.get("messages")
    if task.interrupt:
        received = [e for e in events if e.type == "MESSAGE_RECEIVED"]
        assert [e.payload.get("content") for e in received] == [task.interrupt]
    assert sum(e.type in TERMINAL for e in events) == 1
