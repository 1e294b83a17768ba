"""A human approves or denies a tool call through the gateway, across real processes."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.gateway.conftest import drive
from tests.support.sse import parse_frames
from tests.support.stack import Stack

pytestmark = pytest.mark.integration


def run_with_decision(
    url: str, key: str, query: str, decide: Callable[[httpx.Client, str], None]
) -> list[dict[str, Any]]:
    """Submit, follow the stream, call `decide(client, approval_id)` when asked, read to the end."""
    headers = {"Authorization": f"Bearer {key}"}
    with httpx.Client(base_url=url, headers=headers, timeout=60) as client:
        workflow_id = client.post("/api/v1/tasks", json={"query": query}).json()["workflow_id"]
        lines: list[str] = []
        with client.stream("GET", f"/api/v1/stream/sse?workflow_id={workflow_id}") as response:
            for line in response.iter_lines():
                lines.append(line)
                if line.startswith("data: ") and '"APPROVAL_REQUESTED"' in line:
                    decide(client, json.loads(line[6:])["payload"]["approval_id"])
    frames, _ = parse_frames(lines)
    return [frame.envelope for frame in frames]


def of_type(events: list[dict[str, Any]], type_: str) -> dict[str, Any]:
    return next(e for e in events if e["type"] == type_)


def test_an_approved_call_runs_and_a_second_decision_is_refused(
    gated: tuple[Stack, str, str],
) -> None:
    stack, key_a, key_b = gated
    replies: dict[str, httpx.Response] = {}

    def approve(client: httpx.Client, approval_id: str) -> None:
        foreign = httpx.post(
            f"{stack.gateway}/api/v1/approvals/{approval_id}",
            json={"decision": "denied"},
            headers={"Authorization": f"Bearer {key_b}"},
        )
        replies["foreign"] = foreign
        replies["first"] = client.post(
            f"/api/v1/approvals/{approval_id}", json={"decision": "approved", "comment": "ok"}
        )
        replies["second"] = client.post(
            f"/api/v1/approvals/{approval_id}", json={"decision": "denied"}
        )

    events = run_with_decision(stack.gateway, key_a, "What is 12*7?", approve)

    assert replies["foreign"].status_code == 404  # another tenant cannot see it
    assert replies["first"].status_code == 202, replies["first"].text
    assert replies["second"].status_code == 409
    types = [e["type"] for e in events]
    assert types.index("APPROVAL_REQUESTED") < types.index("WAITING")
    assert types.index("WAITING") < types.index("APPROVAL_DECISION")
    assert types.index("APPROVAL_DECISION") < types.index("TOOL_OBSERVATION")
    decision = of_type(events, "APPROVAL_DECISION")["payload"]
    assert decision["decision"] == "approved"
    assert of_type(events, "TOOL_OBSERVATION")["payload"]["result"] == "84"
    assert "84" in of_type(events, "THREAD_MESSAGE_COMPLETED")["payload"]["content"]
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))


def test_a_denied_call_is_blocked_and_the_model_is_told(gated: tuple[Stack, str, str]) -> None:
    stack, key_a, _ = gated

    def deny(client: httpx.Client, approval_id: str) -> None:
        reply = client.post(f"/api/v1/approvals/{approval_id}", json={"decision": "denied"})
        assert reply.status_code == 202, reply.text

    events = run_with_decision(stack.gateway, key_a, "What is 3*3?", deny)
    observation = of_type(events, "TOOL_OBSERVATION")["payload"]
    assert observation["blocked"] is True
    assert "denied" in observation["result"]
    assert of_type(events, "APPROVAL_DECISION")["payload"]["decision"] == "denied"
    assert events[-1]["type"] == "STREAM_END"


def test_the_console_approves_denies_pauses_resumes_and_cancels(
    gated: tuple[Stack, str, str], browser_tools: Path
) -> None:
    stack, key_a, _ = gated
    result = drive("approvals", stack.gateway, key_a)
    assert result.get("pageErrors") is None
    approved, denied = result["approved"], result["denied"]
    assert approved["buttonsDisabled"] and denied["buttonsDisabled"]
    assert "Approval approved" in approved["notices"]
    assert approved["observation"] == "25"
    assert approved["answer"] == "[demo model] 5*5 = 25"
    assert "Approval denied" in denied["notices"]
    assert "denied" in denied["observation"]
    assert "25" not in denied["answer"] and "16" not in denied["answer"]
    # Pause and cancel from the console while a call waits: both act at the next checkpoint.
    assert result["resumedAnswer"] == "[demo model] 3*3 = 9"
    assert result["cancelledStatus"] == "cancelled"
