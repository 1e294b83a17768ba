"""A run taken over in the middle of its answer tells the answer again: STATUS_UPDATE
{kind: answer_restarted}, the deltas again from index 0, then THREAD_MESSAGE_COMPLETED with
the whole answer. Each face that streams answers drops what it had of the first telling: the
ReAct channel dialect (also for a client resuming anywhere), the CLI and the web console.

The logs are appended to the shared stack's events service as the run's new owner would."""

from __future__ import annotations

import asyncio
import io
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from cli.client import LiveView, follow
from shuttle.client import ShuttleClient
from shuttle.envelope import ANSWER_RESTARTED
from shuttle.grpc_client import tenant_metadata
from shuttle.v1 import common_pb2, events_pb2, events_pb2_grpc
from tests.events.helpers import draft
from tests.gateway.conftest import BROWSER_DIR, AuthStack
from tests.support.sse import Frame, read_stream

pytestmark = pytest.mark.integration

QUERY = "How do answers survive a lost executor?"
FIRST = ["The first owner ", "was cut ", "off here"]
AGAIN = ["The new owner ", "tells the answer ", "whole."]
WHOLE = "".join(AGAIN)


def deltas(pieces: list[str]) -> list[common_pb2.EventDraft]:
    return [
        draft("THREAD_MESSAGE_DELTA", {"delta": piece, "index": i})
        for i, piece in enumerate(pieces)
    ]


def first_telling() -> list[common_pb2.EventDraft]:
    return [draft("WORKFLOW_STARTED", {"query": QUERY}), *deltas(FIRST)]


def takeover() -> list[common_pb2.EventDraft]:
    recovery = {
        "error_type": "EXECUTOR_LOST",
        "recovery_action": "resumed",
        "attempt": 1,
        "max_attempts": 3,
        "from_seq": 1,
    }
    return [draft("ERROR_RECOVERY", recovery), draft("STATUS_UPDATE", {"kind": ANSWER_RESTARTED})]


def the_end() -> list[common_pb2.EventDraft]:
    return [
        draft("THREAD_MESSAGE_COMPLETED", {"content": WHOLE}),
        draft("WORKFLOW_COMPLETED", {"result": WHOLE, "total_tokens": 30}),
    ]


class Log:
    """A workflow of tenant acme on the stack's events service, appended to in steps."""

    def __init__(self, stack: AuthStack) -> None:
        self._stack = stack
        self.workflow_id = asyncio.run(self._create())

    async def _create(self) -> str:
        async with self._stack.stack.channel("events") as channel:
            created = await events_pb2_grpc.EventServiceStub(channel).CreateWorkflow(
                events_pb2.CreateWorkflowRequest(query=QUERY), metadata=tenant_metadata("acme")
            )
        return str(created.workflow_id)

    def append(self, drafts: list[common_pb2.EventDraft]) -> None:
        asyncio.run(self._append(drafts))

    async def _append(self, drafts: list[common_pb2.EventDraft]) -> None:
        async with self._stack.stack.channel("events") as channel:
            await events_pb2_grpc.EventServiceStub(channel).Append(
                events_pb2.AppendRequest(workflow_id=self.workflow_id, events=drafts),
                metadata=tenant_metadata("acme"),
            )


@pytest.fixture(scope="module")
def restarted(auth_stack: AuthStack) -> str:
    """A finished workflow whose answer was restarted after three deltas."""
    log = Log(auth_stack)
    log.append([*first_telling(), *takeover(), *deltas(AGAIN), *the_end()])
    return log.workflow_id


def answer_frames(frames: list[Frame]) -> list[dict[str, Any]]:
    return [json.loads(f.data) for f in frames if f.event == "answer"]


def shown_answer(frames: list[Frame]) -> str:
    """The answer as a dialect client shows it: deltas appended to the answer `start`
    opened, all dropped on `restart`."""
    shown = ""
    for answer in answer_frames(frames):
        if answer["status"] in ("start", "restart"):
            shown = ""
        elif answer["status"] == "delta":
            shown += answer["content"]
    return shown


def test_the_dialect_tells_the_client_to_drop_the_answer_wherever_it_resumes(
    auth_stack: AuthStack, restarted: str
) -> None:
    headers = {"Authorization": f"Bearer {auth_stack.key_a}"}
    path = f"/api/v1/tasks/{restarted}/stream?dialect=react"
    status, frames = read_stream(auth_stack.url, path, headers=headers)
    assert status == 200
    statuses = [a["status"] for a in answer_frames(frames)]
    assert statuses == ["start", *["delta"] * 3, "restart", "start", *["delta"] * 3, "done"]
    assert answer_frames(frames)[-1]["content"] == WHOLE
    assert shown_answer(frames) == WHOLE
    assert json.loads(frames[-1].data)["answer"] == WHOLE

    # A client cut off after any frame that carries an id resumes from it and, with what it
    # had, shows the whole answer once: from the middle of the first telling, on the restart,
    # from the middle of the second.
    cuts = [i for i, f in enumerate(frames) if f.id]
    for cut in cuts[:-1]:
        resumed = {**headers, "Last-Event-ID": str(frames[cut].id)}
        status, rest = read_stream(auth_stack.url, path, headers=resumed)
        assert status == 200
        assert shown_answer(frames[: cut + 1] + rest) == WHOLE, frames[cut]


@pytest.mark.parametrize("live", [True, False])
def test_the_cli_drops_the_answer_it_showed(
    auth_stack: AuthStack, restarted: str, live: bool
) -> None:
    out, err = io.StringIO(), io.StringIO()
    view = LiveView(out=out, err=err, live=live)
    with ShuttleClient(auth_stack.url, auth_stack.key_a) as shuttle:
        follow(shuttle, restarted, view)

    assert view.done is not None and view.done["answer"] == WHOLE
    notes = err.getvalue().splitlines()
    assert notes.count("— answer restarted —") == 1
    assert notes.index("— answer restarted —") > notes.index("answer:")
    if live:
        # On a terminal the first telling stays on screen above the marker; the answer
        # after it is whole.
        assert out.getvalue() == "".join(FIRST) + "\n" + WHOLE + "\n"
    else:
        # On a pipe only the answer is written, once.
        assert out.getvalue() == WHOLE + "\n"


def test_the_console_clears_the_answer_on_a_restart(
    auth_stack: AuthStack, browser_tools: Path
) -> None:
    log = Log(auth_stack)
    log.append(first_telling())
    driver = subprocess.Popen(
        [
            "node",
            str(BROWSER_DIR / "drive.mjs"),
            "restart",
            auth_stack.url,
            auth_stack.key_a,
            log.workflow_id,
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert driver.stdin is not None and driver.stdout is not None

    def shown_once(answer: str) -> dict[str, Any]:
        """What the console shows, once it shows `answer` (or gave up waiting)."""
        assert driver.stdin is not None and driver.stdout is not None
        driver.stdin.write(json.dumps({"answer": answer}) + "\n")
        driver.stdin.flush()
        line = driver.stdout.readline()
        assert line, driver.stderr.read() if driver.stderr else "the driver ended"
        seen: dict[str, Any] = json.loads(line)
        return seen

    try:
        assert shown_once("".join(FIRST)) == {"matched": True, "answer": "".join(FIRST)}
        log.append(takeover())
        assert shown_once("") == {"matched": True, "answer": ""}
        log.append(deltas(AGAIN[:1]))
        assert shown_once(AGAIN[0].strip()) == {"matched": True, "answer": AGAIN[0].strip()}
        log.append(deltas(AGAIN)[1:] + the_end())
        assert shown_once(WHOLE) == {"matched": True, "answer": WHOLE}
        driver.stdin.write("end\n")
        driver.stdin.close()
        result = json.loads(driver.stdout.read().strip().splitlines()[-1])
        assert driver.wait(60) == 0
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
    assert result.get("pageErrors") is None
    assert result["answer"] == WHOLE
    assert result["notices"].count("— answer restarted —") == 1
