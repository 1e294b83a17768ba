"""A client in another language over gRPC: Node.js (`@grpc/grpc-js`, `@grpc/proto-loader`
loading proto/ as it is) starts a run on the executor, follows its log to STREAM_END, drops
its stream and resumes from the next seq, and is refused without the credential."""

from __future__ import annotations

import json
import os
import subprocess
from typing import Any

import pytest

from shuttle.envelope import type_name
from shuttle.v1 import events_pb2, events_pb2_grpc
from tests.clients.conftest import CLIENT_DIR, TENANT
from tests.support.stack import Stack


def node_client(
    stack: Stack, *args: str, token: str | None = None
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SHUTTLE_TOKEN": stack.token if token is None else token}
    return subprocess.run(
        ["node", str(CLIENT_DIR / "client.js"), *args, "--events", stack.target("events")],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def lines_of(completed: subprocess.CompletedProcess[str]) -> list[dict[str, Any]]:
    assert completed.returncode == 0, completed.stderr
    return [json.loads(line) for line in completed.stdout.splitlines()]


async def logged(stack: Stack, workflow_id: str) -> list[tuple[int, str]]:
    """(seq, type) of every event of the run, as the events service lists them."""
    async with stack.channel("events") as channel:
        reply = await events_pb2_grpc.EventServiceStub(channel).List(
            events_pb2.ListRequest(workflow_id=workflow_id, tenant_id=TENANT, limit=1000)
        )
    return [(event.seq, f"EVENT_TYPE_{type_name(event.type)}") for event in reply.events]


@pytest.fixture(scope="module")
def dropped_run(stack: Stack) -> list[dict[str, Any]]:
    """The lines of a run started from Node whose stream dropped after three events."""
    started = node_client(
        stack,
        "start",
        "--executor",
        stack.target("executor"),
        "--query",
        "What is 12*7?",
        "--drop-after",
        "3",
    )
    return lines_of(started)


async def test_a_node_client_follows_its_run_across_a_dropped_stream(
    stack: Stack, dropped_run: list[dict[str, Any]]
) -> None:
    workflow_id = dropped_run[0]["workflow_id"]
    resumed = [line for line in dropped_run if "resumed_from" in line]
    assert resumed == [{"resumed_from": 4}]
    read = [(line["seq"], line["type"]) for line in dropped_run if "seq" in line]
    # Nothing lost, nothing repeated: exactly the run's log, in order, to STREAM_END.
    assert read == await logged(stack, workflow_id)
    assert [seq for seq, _ in read] == list(range(1, len(read) + 1))
    assert read[-2:] == [
        (len(read) - 1, "EVENT_TYPE_WORKFLOW_COMPLETED"),
        (len(read), "EVENT_TYPE_STREAM_END"),
    ]
    [answer] = [
        line for line in dropped_run if line.get("type") == "EVENT_TYPE_THREAD_MESSAGE_COMPLETED"
    ]
    assert "84" in json.dumps(answer["payload"])


async def test_a_node_client_reads_a_log_from_a_seq(
    stack: Stack, dropped_run: list[dict[str, Any]]
) -> None:
    workflow_id = dropped_run[0]["workflow_id"]
    lines = lines_of(node_client(stack, "follow", "--workflow", workflow_id, "--from-seq", "5"))
    assert [(line["seq"], line["type"]) for line in lines] == (await logged(stack, workflow_id))[4:]


def test_a_node_client_without_the_credential_is_refused(stack: Stack) -> None:
    refused = node_client(
        stack, "start", "--executor", stack.target("executor"), "--query", "hi", token=""
    )
    assert refused.returncode == 1
    assert "UNAUTHENTICATED" in refused.stderr and "authorization: Bearer" in refused.stderr
    wrong = node_client(stack, "follow", "--workflow", "wf-x", token="not-the-token")
    assert wrong.returncode == 1 and "UNAUTHENTICATED" in wrong.stderr
    missing = node_client(stack, "follow", "--workflow", "wf-missing")
    assert missing.returncode == 1 and "NOT_FOUND" in missing.stderr
