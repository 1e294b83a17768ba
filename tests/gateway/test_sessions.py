"""Sessions through the real stack: follow-ups see earlier turns, deletion leaves nothing,
and another tenant can neither read nor delete."""

from __future__ import annotations

import json
import re
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from shuttle.settings import AuthMode, Settings
from tests.gateway.conftest import AuthStack, create_key
from tests.support.gateway_server import GatewayServer
from tests.support.scripted_openai import Reply, ScriptedOpenAI, text, tool_call
from tests.support.stack import Stack, start_stack

pytestmark = pytest.mark.integration


def notes_model(body: dict[str, Any]) -> Reply:
    """Writes the question to a workspace file, then answers naming every user message."""
    messages = body["messages"]
    users = [m["content"] for m in messages if m["role"] == "user"]
    if body.get("stream"):
        question = re.search(r"^Question: (.*)$", users[-1], re.MULTILINE)
        return text("Answer: " + (question.group(1) if question else "?"))
    if messages[-1]["role"] == "tool":
        return text("Noted.")
    return tool_call("file_ops", {"operation": "write", "path": "note.txt", "content": users[-1]})


class ScriptedStack:
    def __init__(self, stack: Stack, data_dir: Path, model: ScriptedOpenAI, key: str, other: str):
        self.stack, self.data_dir, self.model = stack, data_dir, model
        self.key, self.other = key, other

    def client(self, key: str | None = None) -> httpx.Client:
        return httpx.Client(
            base_url=self.stack.gateway,
            headers={"Authorization": f"Bearer {key or self.key}"},
            timeout=60,
        )

    def run(self, query: str, session_id: str | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {"query": query}
        if session_id:
            body["session_id"] = session_id
        with self.client() as client:
            created = client.post("/api/v1/tasks", json=body)
            assert created.status_code == 201, created.text
            wait_for_end(client, created.json()["workflow_id"])
        result: dict[str, Any] = created.json()
        return result

    def rows(self, sql: str, *args: object) -> int:
        with sqlite3.connect(self.data_dir / "shuttle.db") as db:
            return int(db.execute(sql, args).fetchone()[0])


def agent_calls(model: ScriptedOpenAI) -> list[dict[str, Any]]:
    """The agent's own calls (not the planner's routing), in order."""
    return [
        r
        for r in model.requests
        if r["messages"][0]["content"].startswith("You are a capable assistant")
    ]


def wait_for_end(client: httpx.Client, workflow_id: str) -> None:
    with client.stream("GET", f"/api/v1/stream/sse?workflow_id={workflow_id}") as response:
        assert response.status_code == 200
        for _ in response.iter_lines():
            pass


@pytest.fixture(scope="module")
def scripted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ScriptedStack]:
    data_dir = Path(tmp_path_factory.mktemp("sessions"))
    model = ScriptedOpenAI(notes_model).start()
    key, other = create_key(data_dir, "acme"), create_key(data_dir, "globex")
    stack = start_stack(
        data_dir,
        openai_base_url=model.base_url,
        extra_env={"SHUTTLE_AUTH": "required", "SHUTTLE_RATE_LIMIT": "100000/minute"},
    )
    yield ScriptedStack(stack, data_dir, model, key, other)
    stack.stop()
    model.stop()


def test_a_follow_up_joins_the_session_and_the_model_sees_the_earlier_turn(
    scripted: ScriptedStack,
) -> None:
    first = scripted.run("What is the weather in Paris?")
    session_id = first["session_id"]
    assert session_id.startswith("sess-")
    scripted.model.requests.clear()
    second = scripted.run("Now do the same for Berlin.", session_id)
    assert second["session_id"] == session_id

    loop_call = agent_calls(scripted.model)[0]
    sent = [(m["role"], m.get("content")) for m in loop_call["messages"][1:]]
    assert sent == [
        ("user", "What is the weather in Paris?"),
        ("assistant", "Answer: What is the weather in Paris?"),
        ("user", "Now do the same for Berlin."),
    ]
    with scripted.client() as client:
        session = client.get(f"/api/v1/sessions/{session_id}").json()
        events = [e for page in session_events(client, session_id, 1000) for e in page]
        listed = client.get("/api/v1/sessions", params={"limit": 100}).json()
    assert [t["workflow_id"] for t in session["turns"]] == [
        first["workflow_id"],
        second["workflow_id"],
    ]
    assert [t["status"] for t in session["turns"]] == ["completed", "completed"]
    assert session["turns"][1]["answer"] == "Answer: Now do the same for Berlin."
    assert session["turns"][0]["usage"]["total_tokens"] > 0
    assert session["title"] == "What is the weather in Paris?"
    # Every workflow's events, turn by turn, each in seq order.
    order = [(e["workflow_id"], e["seq"]) for e in events]
    assert order == sorted(order, key=lambda p: (p[0] != first["workflow_id"], p[1]))
    started = [e for e in events if e["type"] == "WORKFLOW_STARTED"]
    assert [e["payload"]["session_id"] for e in started] == [session_id, session_id]
    assert session_id in [s["session_id"] for s in listed["sessions"]]


def test_sessions_are_listed_in_pages(scripted: ScriptedStack) -> None:
    ids = {scripted.run(f"page test {n}")["session_id"] for n in range(3)}
    seen: list[str] = []
    offset: int | None = 0
    with scripted.client() as client:
        while offset is not None:
            page = client.get("/api/v1/sessions", params={"limit": 2, "offset": offset}).json()
            assert len(page["sessions"]) <= 2
            seen += [s["session_id"] for s in page["sessions"]]
            offset = page["next_offset"]
    assert ids <= set(seen) and len(seen) == len(set(seen))


def session_events(
    client: httpx.Client, session_id: str, limit: int, **params: str
) -> list[list[dict[str, Any]]]:
    """Every page of the session's events, following `next` from the first."""
    pages: list[list[dict[str, Any]]] = []
    cursor: str | None = ""
    while cursor is not None:
        query = {"limit": str(limit), **params, **({"from": cursor} if cursor else {})}
        reply = client.get(f"/api/v1/sessions/{session_id}/events", params=query)
        assert reply.status_code == 200, reply.text
        pages.append(reply.json()["events"])
        cursor = reply.json()["next"]
    return pages


def test_session_events_come_in_pages_that_join_without_gap_or_repeat(
    scripted: ScriptedStack,
) -> None:
    first = scripted.run("Remember the number 7.")
    session_id = first["session_id"]
    second = scripted.run("And the number 8.", session_id)
    workflows = [first["workflow_id"], second["workflow_id"]]
    with scripted.client() as client:
        (whole,) = session_events(client, session_id, 1000)
        order = [(e["workflow_id"], e["seq"]) for e in whole]
        assert order == sorted(order, key=lambda p: (workflows.index(p[0]), p[1]))
        assert {wf for wf, _ in order} == set(workflows) and len(whole) > 10
        for limit in (1, 3, 7, len(whole) - 1, len(whole)):
            pages = session_events(client, session_id, limit)
            assert all(len(page) == limit for page in pages[:-1])
            joined = [(e["workflow_id"], e["seq"]) for page in pages for e in page]
            assert joined == order, limit
        # A type filter pages the same way over what it selects.
        (tools,) = session_events(client, session_id, 1000, types="TOOL_INVOKED")
        paged = session_events(client, session_id, 1, types="TOOL_INVOKED")
        assert [e["seq"] for page in paged for e in page] == [e["seq"] for e in tools]
        assert len(tools) == 2

        other = scripted.run("A session of its own.")["workflow_id"]
        for cursor in ("nonsense", f"{other}:1", f"{workflows[0]}:0", f"{workflows[0]}:x"):
            refused = client.get(f"/api/v1/sessions/{session_id}/events", params={"from": cursor})
            assert refused.status_code == 400, cursor
            assert "<workflow_id>:<seq>" in refused.json()["error"]["message"]
        too_many = client.get(f"/api/v1/sessions/{session_id}/events", params={"limit": 1001})
        assert too_many.status_code == 400
        assert client.get(f"/api/v1/sessions/{session_id}/events").status_code == 200


def test_deleting_a_session_leaves_no_rows_and_no_files(scripted: ScriptedStack) -> None:
    first = scripted.run("Remember the number 41.")
    session_id = first["session_id"]
    second = scripted.run("And add one.", session_id)
    workflows = [first["workflow_id"], second["workflow_id"]]
    workspaces = [scripted.data_dir / "workspaces" / "acme" / wf for wf in workflows]
    assert all((w / "note.txt").is_file() for w in workspaces)
    marks = ",".join("?" * len(workflows))
    counts = {
        "events": f"SELECT count(*) FROM events WHERE workflow_id IN ({marks})",
        "workflows": f"SELECT count(*) FROM workflows WHERE id IN ({marks})",
        "tool_audit": f"SELECT count(*) FROM tool_audit WHERE workflow_id IN ({marks})",
        "gateway_tasks": f"SELECT count(*) FROM gateway_tasks WHERE workflow_id IN ({marks})",
    }
    turns_sql = "SELECT count(*) FROM gateway_session_turns WHERE session_id = ?"
    session_sql = "SELECT count(*) FROM gateway_sessions WHERE session_id = ?"
    # Audit rows are written just after the tool results reach the agent.
    deadline = time.monotonic() + 30
    while not scripted.rows(counts["tool_audit"], *workflows) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert all(scripted.rows(sql, *workflows) > 0 for sql in counts.values())
    assert scripted.rows(turns_sql, session_id) == 2

    with scripted.client() as client:
        assert client.delete(f"/api/v1/sessions/{session_id}").status_code == 204
        assert client.get(f"/api/v1/sessions/{session_id}").status_code == 404
        assert client.get(f"/api/v1/tasks/{workflows[0]}").status_code == 404
        again = client.delete(f"/api/v1/sessions/{session_id}")
    assert again.status_code == 404 and again.json()["error"]["code"] == "not_found"
    assert {name: scripted.rows(sql, *workflows) for name, sql in counts.items()} == dict.fromkeys(
        counts, 0
    )
    assert scripted.rows(turns_sql, session_id) == 0
    assert scripted.rows(session_sql, session_id) == 0
    assert not any(w.exists() for w in workspaces)


def test_another_tenant_can_neither_read_nor_delete_a_session(scripted: ScriptedStack) -> None:
    mine = scripted.run("A private question.")
    session_id = mine["session_id"]
    with scripted.client(scripted.other) as intruder:
        for response in (
            intruder.get(f"/api/v1/sessions/{session_id}"),
            intruder.get(f"/api/v1/sessions/{session_id}/events"),
            intruder.delete(f"/api/v1/sessions/{session_id}"),
        ):
            assert response.status_code == 404
            assert response.json()["error"]["code"] == "not_found"
        listed = intruder.get("/api/v1/sessions", params={"limit": 100}).json()["sessions"]
        assert session_id not in [s["session_id"] for s in listed]
        # The same id names the intruder's own, separate session: nothing of mine leaks in.
        scripted.model.requests.clear()
        created = intruder.post(
            "/api/v1/tasks", json={"query": "Whose turn is it?", "session_id": session_id}
        )
        wait_for_end(intruder, created.json()["workflow_id"])
        theirs = intruder.get(f"/api/v1/sessions/{session_id}").json()
    sent = json.dumps(scripted.model.requests)
    assert "A private question." not in sent
    assert [t["user_message"] for t in theirs["turns"]] == ["Whose turn is it?"]
    with scripted.client() as client:
        kept = client.get(f"/api/v1/sessions/{session_id}").json()
    assert [t["user_message"] for t in kept["turns"]] == ["A private question."]
    assert kept["turns"][0]["workflow_id"] == mine["workflow_id"]


def test_the_openai_face_maps_earlier_messages_onto_a_session(scripted: ScriptedStack) -> None:
    client = openai.OpenAI(
        base_url=f"{scripted.stack.gateway}/v1", api_key=scripted.key, max_retries=0, timeout=60
    )
    scripted.model.requests.clear()
    reply = client.chat.completions.create(
        model="shuttle-auto",
        messages=[
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Paris weather?"},
            {"role": "assistant", "content": "Sunny, 18°C."},
            {"role": "user", "content": "And Berlin?"},
        ],
    )
    session_id = (reply.model_extra or {})["shuttle_session_id"]
    sent = [(m["role"], m.get("content")) for m in agent_calls(scripted.model)[0]["messages"][1:]]
    assert sent == [
        ("user", "Paris weather?"),
        ("assistant", "Sunny, 18°C."),
        ("user", "And Berlin?"),
    ]
    with scripted.client() as api:
        turns = api.get(f"/api/v1/sessions/{session_id}").json()["turns"]
    assert [(t["user_message"], t["answer"]) for t in turns] == [
        ("Paris weather?", "Sunny, 18°C."),
        ("And Berlin?", reply.choices[0].message.content),
    ]
    assert turns[0]["workflow_id"] is None


def test_a_task_names_its_session_on_the_auth_stack(auth_stack: AuthStack) -> None:
    """Without a session_id, every task opens a new session of its own."""
    with auth_stack.client(auth_stack.key_a) as client:
        a = client.post("/api/v1/tasks", json={"query": "What is 2+2?"}).json()
        b = client.post("/api/v1/tasks", json={"query": "What is 3+3?"}).json()
    assert a["session_id"] and b["session_id"] and a["session_id"] != b["session_id"]


def test_a_run_is_given_the_newest_turns_of_its_session_that_fit(scripted: ScriptedStack) -> None:
    ports = scripted.stack.grpc_ports
    settings = Settings(
        events_port=ports["events"],
        tools_port=ports["tools"],
        planner_port=ports["planner"],
        executor_port=ports["executor"],
        data_dir=scripted.data_dir,
        database_url="",
        auth=AuthMode.REQUIRED,
        session_history_max_bytes=2_500,
        internal_token=scripted.stack.token,
    )
    turns = [(f"Question {n} " + "q" * 500, f"Answer {n} " + "a" * 500) for n in range(3)]
    earlier = [
        message
        for user, answer in turns
        for message in ({"role": "user", "content": user}, {"role": "assistant", "content": answer})
    ]
    server = GatewayServer(settings).start()
    try:
        client = openai.OpenAI(
            base_url=f"{server.url}/v1", api_key=scripted.key, max_retries=0, timeout=60
        )
        scripted.model.requests.clear()
        client.chat.completions.create(
            model="shuttle-auto",
            messages=[*earlier, {"role": "user", "content": "And now?"}],  # type: ignore[list-item]
        )
    finally:
        server.stop()
    sent = [m.get("content") for m in agent_calls(scripted.model)[0]["messages"][1:]]
    # A turn is about 1,020 bytes: the newest two fit in 2,500, all three would not.
    assert sent == [*turns[1], *turns[2], "And now?"]
