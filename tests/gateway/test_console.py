"""The web console end to end in headless Chromium, with a screenshot kept as an artefact."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import httpx
import pytest

from shuttle.grpc_client import tenant_metadata
from shuttle.v1 import events_pb2, events_pb2_grpc
from tests.events.helpers import draft
from tests.gateway.conftest import AuthStack, drive

pytestmark = pytest.mark.integration

ARTIFACTS = Path(__file__).parents[2] / "var" / "test-artifacts"


def test_console_is_served_without_any_cdn(auth_stack: AuthStack) -> None:
    page = httpx.get(f"{auth_stack.url}/")
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]
    assert not re.search(r"(src|href)=\"(https?:)?//", page.text)
    for asset in re.findall(r"(?:src|href)=\"(/static/[^\"]+)\"", page.text):
        assert httpx.get(f"{auth_stack.url}{asset}").status_code == 200, asset


def test_console_runs_and_replays_a_task(auth_stack: AuthStack, browser_tools: Path) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shots = [ARTIFACTS / "console-1280.png", ARTIFACTS / "console-390.png"]
    for shot in shots:
        shot.unlink(missing_ok=True)
    result = drive("console", auth_stack.url, auth_stack.key_a, str(ARTIFACTS))
    assert result.get("pageErrors") is None
    assert result["cdnScripts"] == []
    assert "calculator" in result["toolSummary"]
    assert (result["toolOpenBefore"], result["toolOpenAfter"]) == (False, True)
    assert '"expression": "12*7"' in result["toolArgs"]
    assert result["toolObservation"] == "84"
    assert result["toolDone"] and re.fullmatch(r" · \d+ ms", result["toolTook"])
    assert result["answerHtml"] == "<p>[demo model] 12*7 = 84</p>"
    # Figures for people: whole words, money rounded, one step per iteration with its time.
    assert re.fullmatch(
        r"\d+ tokens \(\d+ in, \d+ out\) · \$0\.00 · \d+ ms · 1 tool call", result["usage"]
    ), result["usage"]
    assert re.fullmatch(r"\d+ tokens · \$0\.00 · 1 tool call · 2 steps", result["counters"])
    assert [re.sub(r"\d+ ms|[\d.]+ s", "T", s) for s in result["steps"]] == [
        "Step 1 · T",
        "Step 2 · T",
    ]
    assert result["hash"] == "#" + result["workflowId"]
    # The task has finished: no control applies, so none is offered.
    assert result["disabled"] == [
        ["pause", True],
        ["resume", True],
        ["cancel", True],
        ["interrupt", True],
        ["interrupt-send", True],
    ]
    assert result["tasksListed"] >= 1
    assert set(result["filtered_completed"]) == {"completed"}
    assert set(result["filtered_running"]) <= {"running"}
    assert result["narrowOverflow"] <= 0
    assert result["answerAfterReload"] == "[demo model] 12*7 = 84"
    assert result["toolsAfterReload"] == 1
    # The conversation listed first is the one just run; continuing it (Ctrl+Enter) adds a
    # turn.
    assert result["sessionTurns"] == ["What is 12*7?", "What is 2*3?"]
    for shot in shots:
        assert shot.stat().st_size > 10_000, shot


# Markup that runs if any value reaches the page as HTML, in a text or an attribute context.
HOSTILE = '"><img src=x onerror=window.__shuttleXss=1>'


async def hostile_log(stack: AuthStack) -> str:
    """A finished workflow of tenant acme whose events carry HOSTILE in every field the
    console shows: any producer may append events, so none of their fields is trusted."""
    tenant = tenant_metadata("acme")
    async with stack.stack.channel("events") as channel:
        events = events_pb2_grpc.EventServiceStub(channel)
        created = await events.CreateWorkflow(
            events_pb2.CreateWorkflowRequest(query=HOSTILE), metadata=tenant
        )
        tool = {"tool_name": HOSTILE, "call_id": "c1"}
        await events.Append(
            events_pb2.AppendRequest(
                workflow_id=created.workflow_id,
                events=[
                    draft("WORKFLOW_STARTED", {"query": HOSTILE}),
                    draft("AGENT_THINKING", {"status": "done", "reasoning": HOSTILE}),
                    draft("TOOL_INVOKED", {**tool, "tool_args": {"expression": HOSTILE}}),
                    draft(
                        "TOOL_OBSERVATION",
                        {
                            **tool,
                            "duration_ms": HOSTILE,
                            "result": HOSTILE,
                            "artifacts": [{"name": HOSTILE, "size_bytes": HOSTILE}],
                        },
                    ),
                    draft(
                        "APPROVAL_REQUESTED",
                        {"tool_name": HOSTILE, "approval_id": HOSTILE, "tool_args": HOSTILE},
                    ),
                    draft("APPROVAL_DECISION", {"decision": HOSTILE}),
                    draft("MESSAGE_RECEIVED", {"from": "user", "content": HOSTILE}),
                    draft("ERROR_OCCURRED", {"error_message": HOSTILE}),
                    draft("THREAD_MESSAGE_DELTA", {"index": 0, "delta": HOSTILE}),
                    draft(
                        "THREAD_MESSAGE_COMPLETED",
                        {"content": f"{HOSTILE} [link](https://example.com/{HOSTILE}) `{HOSTILE}`"},
                    ),
                    draft(
                        "WORKFLOW_COMPLETED",
                        {"result": HOSTILE, "duration_ms": HOSTILE, "total_tokens": HOSTILE},
                    ),
                ],
            ),
            metadata=tenant,
        )
        return str(created.workflow_id)


def test_markup_in_any_field_is_shown_as_text_and_never_runs(
    auth_stack: AuthStack, browser_tools: Path
) -> None:
    # A task and a conversation named by markup, for the lists beside the run.
    with auth_stack.client(auth_stack.key_a) as client:
        created = client.post("/api/v1/tasks", json={"query": f"{HOSTILE} What is 2*2?"})
        assert created.status_code == 201, created.text
        with client.stream("GET", created.json()["stream_url"]) as stream:
            for _ in stream.iter_lines():
                pass
    workflow_id = asyncio.run(hostile_log(auth_stack))

    result = drive("hostile", auth_stack.url, auth_stack.key_a, workflow_id)

    assert result.get("pageErrors") is None
    assert (result["ran"], result["dialogs"], result["images"]) == (0, [], 0)
    assert result["foreign"] == []
    assert result["query"] == HOSTILE
    shown = result["timeline"]
    for text in (
        f"Thought · {HOSTILE}",
        f"Observation ({HOSTILE} ms)",
        f"Preview {HOSTILE} ({HOSTILE})",
        f"Approval needed for {HOSTILE}",
        f"Approval {HOSTILE}",
        f"Follow-up: {HOSTILE}",
        f"Error: {HOSTILE}",
    ):
        assert any(text in entry for entry in shown), (text, shown)
    assert result["answer"].count(HOSTILE) == 3
    assert any(entry.startswith(f"{HOSTILE} What is 2*2?") for entry in result["tasks"])
    assert [f"{HOSTILE} What is 2*2?"] * 2 in result["sessions"]
    # The key lives as long as the tab, never on disk.
    assert result["storedKey"] == {"session": auth_stack.key_a, "local": None}
