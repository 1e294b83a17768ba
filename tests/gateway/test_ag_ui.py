"""AG-UI at /ag-ui against a running stack with authentication: every event valid for the
`ag-ui-protocol` models, @ag-ui/client's HttpAgent running a task and rejoining it after a
dropped connection, a rejoin after any frame losing and repeating nothing, and refusals."""

from __future__ import annotations

import json
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from ag_ui.core import Event
from pydantic import TypeAdapter

from tests.gateway.conftest import AuthStack

pytestmark = pytest.mark.integration

CLIENT_DIR = Path(__file__).parent / "ag_ui_client"
EVENT = TypeAdapter(Event)
QUERY = "What is 12*7?"


@dataclass(frozen=True)
class Frame:
    id: str
    data: dict[str, Any]


def frames_of(response: httpx.Response) -> list[Frame]:
    read: list[Frame] = []
    frame_id, data = "", ""
    for line in response.iter_lines():
        if line.startswith("id: "):
            frame_id = line[4:]
        elif line.startswith("data: "):
            data = line[6:]
        elif not line and data:
            read.append(Frame(frame_id, json.loads(data)))
            frame_id, data = "", ""
    return read


def run_input(run_id: str, **changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "threadId": f"thread-{run_id}",
        "runId": run_id,
        "state": {},
        "messages": [{"id": f"{run_id}-user", "role": "user", "content": QUERY}],
        "tools": [],
        "context": [],
        "forwardedProps": {},
    }
    body.update(changes)
    return body


def post(stack: AuthStack, key: str, body: dict[str, Any]) -> tuple[int, list[Frame], str]:
    headers = {"Accept": "text/event-stream"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    with (
        httpx.Client(base_url=stack.url, headers=headers, timeout=60) as client,
        client.stream("POST", "/ag-ui", json=body) as response,
    ):
        if response.status_code != 200:
            return response.status_code, [], response.read().decode()
        return 200, frames_of(response), ""


def rejoin(stack: AuthStack, key: str, run_id: str, last_id: str | None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}"}
    if last_id is not None:
        headers["Last-Event-ID"] = last_id
    with httpx.Client(base_url=stack.url, headers=headers, timeout=60) as client:
        return client.get(f"/ag-ui/runs/{run_id}")


def rejoined_frames(response: httpx.Response) -> list[Frame]:
    assert response.status_code == 200, response.text
    return frames_of(response)


@pytest.fixture(scope="module")
def finished_run(auth_stack: AuthStack) -> tuple[str, list[Frame]]:
    run_id = f"run-{uuid.uuid4().hex[:8]}"
    status, frames, _ = post(auth_stack, auth_stack.key_a, run_input(run_id))
    assert status == 200
    return run_id, frames


def seq_of(frame: Frame) -> tuple[int, int]:
    seq, _, part = frame.id.partition(".")
    return int(seq), int(part) if part else 1_000_000


def test_every_event_is_valid_ag_ui_and_the_run_reads_whole(
    finished_run: tuple[str, list[Frame]],
) -> None:
    run_id, frames = finished_run
    events = [EVENT.validate_python(frame.data) for frame in frames]
    types = [event.type.value for event in events]
    assert types[0] == "RUN_STARTED" and types[-1] == "RUN_FINISHED"
    assert frames[0].data["runId"] == run_id and frames[0].data["threadId"] == f"thread-{run_id}"
    # Every frame carries the seq of its log event, in order.
    assert all(frame.id for frame in frames)
    assert [seq_of(f) for f in frames] == sorted(seq_of(f) for f in frames)
    for kind in ("STEP_STARTED", "TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_RESULT"):
        assert kind in types
    [arguments] = [f.data["delta"] for f in frames if f.data["type"] == "TOOL_CALL_ARGS"]
    assert json.loads(arguments) == {"expression": "12*7"}
    answer = "".join(f.data["delta"] for f in frames if f.data["type"] == "TEXT_MESSAGE_CONTENT")
    assert answer == frames[-1].data["result"] == "[demo model] 12*7 = 84"
    final_state = [f.data for f in frames if f.data["type"] == "STATE_SNAPSHOT"][-1]
    assert final_state["snapshot"]["status"] == "completed"
    assert final_state["snapshot"]["usage"]["total_tokens"] > 0
    # Steps open and close in pairs.
    started = [f.data["stepName"] for f in frames if f.data["type"] == "STEP_STARTED"]
    finished = [f.data["stepName"] for f in frames if f.data["type"] == "STEP_FINISHED"]
    assert sorted(started) == sorted(finished) == ["iteration 1", "iteration 2"]


def test_rejoining_after_any_frame_loses_and_repeats_nothing(
    auth_stack: AuthStack, finished_run: tuple[str, list[Frame]]
) -> None:
    run_id, frames = finished_run
    for cut, last in enumerate(frames[:-1]):
        again = rejoined_frames(rejoin(auth_stack, auth_stack.key_a, run_id, last.id))
        opening = [frame for frame in again if frame.id == last.id]
        rest = again[len(opening) :]
        assert [frame.data["type"] for frame in opening[:3]] == [
            "RUN_STARTED",
            "MESSAGES_SNAPSHOT",
            "STATE_SNAPSHOT",
        ], last.id
        for frame in again:
            EVENT.validate_python(frame.data)
        # Exactly the frames after the cut, with their ids.
        assert rest == frames[cut + 1 :], last.id
        snapshot = opening[1].data["messages"]
        assert snapshot[0] == {"id": f"{run_id}-user", "role": "user", "content": QUERY}
        told = "".join(
            f.data["delta"] for f in frames[: cut + 1] if f.data["type"] == "TEXT_MESSAGE_CONTENT"
        )
        opened = any(f.data["type"] == "TEXT_MESSAGE_START" for f in frames[: cut + 1])
        answers = [m for m in snapshot if m["id"].endswith(":answer:1")]
        assert [m["content"] for m in answers] == ([told] if opened else [])


def test_a_rejoin_from_the_start_gives_the_whole_run(
    auth_stack: AuthStack, finished_run: tuple[str, list[Frame]]
) -> None:
    run_id, frames = finished_run
    again = rejoined_frames(rejoin(auth_stack, auth_stack.key_a, run_id, None))
    assert [f.data["type"] for f in again[:2]] == ["RUN_STARTED", "MESSAGES_SNAPSHOT"]
    assert [f.data for f in again[3:]] == [f.data for f in frames]


def test_posting_the_same_run_again_follows_the_same_run(
    auth_stack: AuthStack, finished_run: tuple[str, list[Frame]]
) -> None:
    run_id, frames = finished_run
    status, again, _ = post(auth_stack, auth_stack.key_a, run_input(run_id))
    assert status == 200 and again == frames


def test_bad_input_and_other_tenants_are_refused_by_name(
    auth_stack: AuthStack, finished_run: tuple[str, list[Frame]]
) -> None:
    run_id, _ = finished_run
    key = auth_stack.key_a
    status, _, body = post(auth_stack, key, {"threadId": "t"})
    assert status == 400 and "RunAgentInput" in body and "runId" in body
    tools = [{"name": "search", "description": "web", "parameters": {}}]
    status, _, body = post(auth_stack, key, run_input("r-tools", tools=tools))
    assert status == 400 and "runs its own tools" in body
    said = [{"id": "a1", "role": "assistant", "content": "hello"}]
    status, _, body = post(auth_stack, key, run_input("r-last", messages=said))
    assert status == 400 and "last message must be the user's" in body
    status, _, body = post(auth_stack, "", run_input("r-anon"))
    assert status == 401
    assert rejoin(auth_stack, auth_stack.key_b, run_id, None).status_code == 404
    garbage = rejoin(auth_stack, key, run_id, "12abc")
    assert garbage.status_code == 400 and "Last-Event-ID" in garbage.text
    beyond = rejoin(auth_stack, key, run_id, "999999")
    assert beyond.status_code == 400 and "beyond" in beyond.text


@pytest.fixture(scope="module")
def node_client() -> Iterator[Path]:
    if shutil.which("node") is None:
        pytest.fail("node is required for the AG-UI client test (see .ci/run)")
    if not (CLIENT_DIR / "node_modules" / "@ag-ui" / "client").exists():
        subprocess.run(
            ["npm", "ci", "--no-audit", "--no-fund"], cwd=CLIENT_DIR, check=True, timeout=600
        )
    yield CLIENT_DIR / "run_agent.js"


def run_http_agent(stack: AuthStack, script: Path, run_id: str, cut: str = "") -> dict[str, Any]:
    args = [stack.url, stack.key_a, f"thread-{run_id}", run_id, QUERY, cut]
    done = subprocess.run(["node", str(script), *args], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def conversation(messages: list[dict[str, Any]], run_id: str) -> list[dict[str, Any]]:
    """The messages with this run's own name taken out of their ids, to compare runs."""
    renamed: list[dict[str, Any]] = json.loads(json.dumps(messages).replace(run_id, "RUN"))
    return renamed


def test_the_ag_ui_client_runs_a_task_and_rejoins_after_a_drop(
    auth_stack: AuthStack, node_client: Path
) -> None:
    whole_id = f"node-{uuid.uuid4().hex[:8]}"
    whole = run_http_agent(auth_stack, node_client, whole_id)
    expected = conversation(whole["messages"], whole_id)
    roles = [message["role"] for message in expected]
    assert roles == ["user", "assistant", "tool", "assistant"]
    assert expected[-1]["content"] == "[demo model] 12*7 = 84"
    for cut in ("TOOL_CALL_START", "TEXT_MESSAGE_CONTENT", "STEP_FINISHED"):
        run_id = f"node-{uuid.uuid4().hex[:8]}"
        dropped = run_http_agent(auth_stack, node_client, run_id, cut)
        assert dropped["cut"], cut
        # The same conversation as the run read whole: nothing lost, nothing twice.
        assert conversation(dropped["messages"], run_id) == expected, cut
        after = dropped["types"][dropped["types"].index("-- rejoin --") :]
        assert after[1:3] == ["RUN_STARTED", "MESSAGES_SNAPSHOT"] and after[-1] == "RUN_FINISHED"
