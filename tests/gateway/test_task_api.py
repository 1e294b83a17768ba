"""Idempotent submission, the task list, control and approval routes."""

from __future__ import annotations

import asyncio
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from sqlalchemy import Connection, Engine, event, update

from gateway.stores.db import tasks
from gateway.stores.task_index import TaskIndex, request_hash
from gateway.submit import TaskSpec
from shuttle.db import create_engine
from tests.gateway.conftest import AuthStack
from tests.support.gateway_server import GatewayServer
from tests.support.stack import free_ports

pytestmark = pytest.mark.integration


def test_same_idempotency_key_gives_the_same_workflow(auth_stack: AuthStack) -> None:
    key = f"test-{uuid.uuid4()}"
    body = {"query": "What is 3*3?"}
    with auth_stack.client(auth_stack.key_a) as client:
        with ThreadPoolExecutor(4) as pool:
            replies = list(
                pool.map(
                    lambda _: client.post(
                        "/api/v1/tasks", json=body, headers={"Idempotency-Key": key}
                    ),
                    range(4),
                )
            )
        assert {r.status_code for r in replies} == {201}
        ids = {r.json()["workflow_id"] for r in replies}
        assert len(ids) == 1
        assert sum(r.headers.get("idempotent-replayed") == "true" for r in replies) == 3
        again = client.post("/api/v1/tasks", json=body, headers={"Idempotency-Key": key})
        assert again.json()["workflow_id"] in ids
        changed = client.post(
            "/api/v1/tasks", json={"query": "What is 4*4?"}, headers={"Idempotency-Key": key}
        )
        assert changed.status_code == 422
        assert changed.json()["error"]["code"] == "idempotency_key_reused"
        fresh = client.post("/api/v1/tasks", json=body)
        assert fresh.json()["workflow_id"] not in ids
        listed = [t["workflow_id"] for t in client.get("/api/v1/tasks?limit=100").json()["tasks"]]
        assert listed.count(next(iter(ids))) == 1
    # Keys are per tenant: the same key elsewhere is a different task.
    with auth_stack.client(auth_stack.key_b) as other:
        elsewhere = other.post("/api/v1/tasks", json=body, headers={"Idempotency-Key": key})
        assert elsewhere.status_code == 201 and elsewhere.json()["workflow_id"] not in ids


def leave_reservation(stack: AuthStack, key: str, query: str, age_seconds: float) -> None:
    """What a request that died after reserving `key` (process killed, backend down) leaves
    in the gateway's database: the key's row, without a workflow, made `age_seconds` ago."""

    async def leave() -> None:
        engine = create_engine(f"sqlite+aiosqlite:///{stack.data_dir / 'shuttle.db'}")
        try:
            index = TaskIndex(engine)
            digest = request_hash(TaskSpec(query=query).as_dict())
            reservation = await index.reserve("acme", key, digest, query)
            assert reservation.row_id is not None
            async with engine.begin() as conn:
                await conn.execute(
                    update(tasks)
                    .where(tasks.c.id == reservation.row_id)
                    .values(created_at=datetime.now(UTC) - timedelta(seconds=age_seconds))
                )
        finally:
            await engine.dispose()

    asyncio.run(leave())


def test_a_key_whose_request_died_is_taken_over_once_stale(auth_stack: AuthStack) -> None:
    stale, fresh = f"died-{uuid.uuid4()}", f"dying-{uuid.uuid4()}"
    body = {"query": "What is 5*5?"}
    leave_reservation(auth_stack, stale, body["query"], age_seconds=61)
    leave_reservation(auth_stack, fresh, body["query"], age_seconds=1)
    with auth_stack.client(auth_stack.key_a) as client:
        # A reservation younger than SHUTTLE_IDEMPOTENCY_RESERVATION_SECONDS may still be
        # starting its run: the key is in flight.
        waiting = client.post("/api/v1/tasks", json=body, headers={"Idempotency-Key": fresh})
        assert waiting.status_code == 409, waiting.text
        assert waiting.json()["error"]["code"] == "idempotency_key_in_flight"
        assert "SHUTTLE_IDEMPOTENCY_RESERVATION_SECONDS=60" in waiting.json()["error"]["message"]
        # One older than that is taken over, and the key then stands for the new run.
        taken = client.post("/api/v1/tasks", json=body, headers={"Idempotency-Key": stale})
        assert taken.status_code == 201, taken.text
        assert "idempotent-replayed" not in taken.headers
        again = client.post("/api/v1/tasks", json=body, headers={"Idempotency-Key": stale})
        assert again.status_code == 201
        assert again.headers["idempotent-replayed"] == "true"
        assert again.json()["workflow_id"] == taken.json()["workflow_id"]
        other = client.post(
            "/api/v1/tasks", json={"query": "What is 6*6?"}, headers={"Idempotency-Key": stale}
        )
        assert other.status_code == 422


def test_task_detail_has_status_result_usage_and_cost(
    auth_stack: AuthStack, finished_a: str
) -> None:
    with auth_stack.client(auth_stack.key_a) as client:
        task = client.get(f"/api/v1/tasks/{finished_a}").json()
    assert task["status"] == "completed"
    assert task["result"] == "[demo model] 6*7 = 42"
    assert task["usage"]["total_tokens"] > 0
    assert task["cost_usd"] == 0.0
    assert task["duration_ms"] >= 0


def as_tenant(server: GatewayServer, key: str) -> httpx.Client:
    return httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {key}"}, timeout=60)


def test_task_detail_needs_no_executor(auth_stack: AuthStack, finished_a: str) -> None:
    """With no executor reachable, a task's status (e.g. failed because its executor died)
    still shows: the registry row comes from the events service."""
    (nobody_listens,) = free_ports(1)
    server = GatewayServer(auth_stack.settings(executor_port=nobody_listens)).start()
    try:
        with as_tenant(server, auth_stack.key_a) as client:
            # The executor is truly out of reach: commands for it fail.
            assert client.post(f"/api/v1/tasks/{finished_a}/pause").status_code == 503
            reply = client.get(f"/api/v1/tasks/{finished_a}")
        with as_tenant(server, auth_stack.key_b) as other:
            elsewhere = other.get(f"/api/v1/tasks/{finished_a}")
    finally:
        server.stop()
    assert reply.status_code == 200, reply.text
    task = reply.json()
    assert (task["workflow_id"], task["task_id"]) == (finished_a, finished_a)
    assert task["status"] == "completed"
    assert task["result"] == "[demo model] 6*7 = 42"
    assert task["query"] == "What is 6*7?"
    assert task["usage"]["total_tokens"] > 0 and task["last_seq"] > 0
    assert task["created_at"] and task["updated_at"]
    # Tenancy holds on the direct read: another tenant's task does not exist for the caller.
    assert elsewhere.status_code == 404


def test_control_routes_reach_the_executor(auth_stack: AuthStack, finished_a: str) -> None:
    # A finished workflow can no longer be controlled: the executor's FAILED_PRECONDITION
    # comes back as 409 with its reason.
    with auth_stack.client(auth_stack.key_a) as client:
        for action in ("pause", "resume", "cancel"):
            reply = client.post(f"/api/v1/tasks/{finished_a}/{action}", json={"reason": "test"})
            assert reply.status_code == 409, reply.text
            assert "workflow is completed" in reply.json()["error"]["message"]
        interrupt = client.post(f"/api/v1/tasks/{finished_a}/interrupt", json={"message": "more"})
        assert interrupt.status_code == 409
        assert "no more messages" in interrupt.json()["error"]["message"]
        empty = client.post(f"/api/v1/tasks/{finished_a}/interrupt", json={"message": ""})
        assert empty.status_code == 400
        missing = client.post("/api/v1/tasks/wf-missing/pause")
        assert missing.status_code == 404


def test_approval_decisions_reach_the_tools_service(auth_stack: AuthStack) -> None:
    with auth_stack.client(auth_stack.key_a) as client:
        bad = client.post("/api/v1/approvals/ap-1", json={"decision": "maybe"})
        assert bad.status_code == 400
        assert "decision" in bad.json()["error"]["message"]
        reply = client.post("/api/v1/approvals/ap-1", json={"decision": "approved"})
    assert reply.status_code == 404
    assert "ap-1" in reply.json()["error"]["message"]


def test_a_new_task_is_recorded_in_two_transactions(auth_stack: AuthStack) -> None:
    """The reservation before the run starts; after it, the run, its new session and the
    turn together. Each transaction is a commit the request waits for, while the run's
    first appends contend for the same database."""
    commits: list[str] = []

    def committed(conn: Connection) -> None:
        commits.append(str(conn.engine.url))

    server = GatewayServer(auth_stack.settings()).start()
    event.listen(Engine, "commit", committed)
    try:
        with as_tenant(server, auth_stack.key_a) as client:
            created = client.post("/api/v1/tasks", json={"query": "What is 8*8?"})
            assert created.status_code == 201, created.text
        assert len(commits) == 2, commits
        with auth_stack.client(auth_stack.key_a) as client:
            session = client.get(f"/api/v1/sessions/{created.json()['session_id']}").json()
        assert session["title"] == "What is 8*8?"
        assert [turn["workflow_id"] for turn in session["turns"]] == [created.json()["workflow_id"]]
    finally:
        event.remove(Engine, "commit", committed)
        server.stop()


def test_a_task_whose_run_is_refused_leaves_no_session(auth_stack: AuthStack) -> None:
    query = f"What is 5*5? ({uuid.uuid4()})"
    with auth_stack.client(auth_stack.key_a) as client:
        refused = client.post("/api/v1/tasks", json={"query": query, "model": "gpt-9"})
        assert refused.status_code == 400
        listed = client.get("/api/v1/sessions?limit=100").json()["sessions"]
        assert query not in [s["title"] for s in listed]
        tasks = client.get("/api/v1/tasks?limit=100").json()["tasks"]
        assert query not in [t["query"] for t in tasks]


def test_a_task_naming_a_model_nobody_configured_is_refused_naming_those_that_are(
    auth_stack: AuthStack,
) -> None:
    with auth_stack.client(auth_stack.key_a) as client:
        refused = client.post("/api/v1/tasks", json={"query": "What is 6*7?", "model": "gpt-9"})
        assert refused.status_code == 400
        error = refused.json()["error"]
        assert error["code"] == "invalid_argument"
        assert "'gpt-9' is not configured here (configured: shuttle-demo)" in error["message"]
        # The configured one, named, runs the task.
        named = client.post(
            "/api/v1/tasks", json={"query": "What is 6*7?", "model": "shuttle-demo"}
        )
        assert named.status_code == 201
