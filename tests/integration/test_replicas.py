"""`shuttle up --replicas`: several processes per service on PostgreSQL and Redis, gateways
interchangeable for a client, runs spread over every executor."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from shuttle.v1 import events_pb2, events_pb2_grpc
from tests.chaos.model import ChaosModel
from tests.support.replicated_stack import ReplicatedStack, replicated_stack
from tests.support.scripted_openai import ScriptedOpenAI
from tests.support.sse import Frame, read_stream

pytestmark = pytest.mark.integration

TASKS = 60
COUNTS = {"events": 2, "tools": 1, "planner": 1, "executor": 3, "gateway": 2}


@pytest.fixture(scope="module")
def model() -> Iterator[ScriptedOpenAI]:
    server = ScriptedOpenAI(ChaosModel(tool_steps=1)).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def replicas(
    tmp_path_factory: pytest.TempPathFactory, model: ScriptedOpenAI
) -> Iterator[ReplicatedStack]:
    data_dir = Path(tmp_path_factory.mktemp("replicas"))
    with replicated_stack(
        data_dir, COUNTS, model.base_url, {"SHUTTLE_RATE_LIMIT": "100000/minute"}
    ) as stack:
        yield stack


def submit(gateway: str, key: str, query: str) -> str:
    reply = httpx.post(
        f"{gateway}/api/v1/tasks",
        json={"query": query},
        headers={"Authorization": f"Bearer {key}"},
        timeout=30,
    )
    assert reply.status_code == 201, reply.text
    workflow_id: str = reply.json()["workflow_id"]
    return workflow_id


def follow_elsewhere(issuer: str, reader: str, key: str, workflow_id: str) -> list[Frame]:
    """The run's stream read at `reader` with a ticket `issuer` gave."""
    issued = httpx.post(
        f"{issuer}/api/v1/stream/ticket",
        json={"workflow_id": workflow_id},
        headers={"Authorization": f"Bearer {key}"},
        timeout=30,
    )
    assert issued.status_code == 200, issued.text
    status, frames = read_stream(reader, issued.json()["stream_url"], timeout=120)
    assert status == 200
    return frames


def lease_owners(stack: ReplicatedStack, workflow_ids: list[str]) -> list[str]:
    async def fetch() -> list[str]:
        async with stack.channel("events") as channel:
            events = events_pb2_grpc.EventServiceStub(channel)
            found = []
            for wf in workflow_ids:
                request = events_pb2.GetWorkflowRequest(workflow_id=wf, tenant_id="acme")
                found.append((await events.GetWorkflow(request, timeout=10)).lease_owner)
            return found

    return asyncio.run(fetch())


def test_tasks_through_either_gateway_run_on_every_executor(replicas: ReplicatedStack) -> None:
    key = replicas.create_key("acme")
    first, second = replicas.gateways
    pairs = [(first, second) if i % 2 == 0 else (second, first) for i in range(TASKS)]

    def one(i: int) -> tuple[str, list[Frame]]:
        issuer, reader = pairs[i]
        workflow_id = submit(issuer, key, f"task {i}: what is {i}*7?")
        return workflow_id, follow_elsewhere(issuer, reader, key, workflow_id)

    with ThreadPoolExecutor(max_workers=12) as pool:
        results = list(pool.map(one, range(TASKS)))

    for workflow_id, frames in results:
        types = [f.event for f in frames]
        assert "WORKFLOW_COMPLETED" in types, (workflow_id, types)
        assert types[-1] == "STREAM_END"
        seqs = [f.envelope["seq"] for f in frames]
        assert seqs == list(range(1, len(frames) + 1)), workflow_id

    # The lease owner is host:pid:nonce of the executor that ran the run.
    by_pid = replicas.pid_names()
    owners = lease_owners(replicas, [wf for wf, _ in results])
    ran = Counter(by_pid.get(int(owner.split(":")[1]), owner) for owner in owners)
    executors = [p.name for p in replicas.replicas("executor")]
    assert sorted(ran) == sorted(executors), ran
    assert all(ran[name] >= 10 for name in executors), ran


def test_one_keys_rate_limit_holds_across_gateways(tmp_path: Path, model: ScriptedOpenAI) -> None:
    with replicated_stack(
        tmp_path, {"gateway": 2}, model.base_url, {"SHUTTLE_RATE_LIMIT": "6/minute"}
    ) as stack:
        key = stack.create_key("acme")
        headers = {"Authorization": f"Bearer {key}"}
        codes: list[int] = []
        for i in range(12):
            gateway = stack.gateways[i % 2]
            codes.append(
                httpx.get(f"{gateway}/api/v1/tasks", headers=headers, timeout=10).status_code
            )
        # Six requests pass in all, whichever gateway took them; the rest are refused.
        assert codes.count(200) == 6, codes
        assert codes.count(429) == 6, codes


def shuttle_up(*args: str, env: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cli", "up", *args],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=30,
    )


@pytest.mark.parametrize(
    ("spec", "wanted"),
    [
        ("0", "'0' is not a count from 1 to 9"),
        ("executor=three", "'three' is not a count"),
        ("workers=2", "'workers=2' is not service=count"),
        ("executor=2,executor=3", "executor is named twice"),
    ],
)
def test_a_bad_spec_is_refused_in_one_line(tmp_path: Path, spec: str, wanted: str) -> None:
    done = shuttle_up("--replicas", spec, env={"SHUTTLE_DATA_DIR": str(tmp_path)})
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and wanted in done.stderr, done.stderr
    assert not (tmp_path / "logs").exists()


@pytest.mark.parametrize(
    "env",
    [
        {"SHUTTLE_DATABASE_URL": "", "SHUTTLE_REDIS_URL": ""},
        {"SHUTTLE_DATABASE_URL": "postgresql+asyncpg://u@127.0.0.1/x", "SHUTTLE_REDIS_URL": ""},
        {"SHUTTLE_DATABASE_URL": "sqlite+aiosqlite:///x.db", "SHUTTLE_REDIS_URL": "redis://x"},
    ],
)
def test_replicas_without_shared_state_are_refused(tmp_path: Path, env: dict[str, str]) -> None:
    done = shuttle_up("--replicas", "executor=2", env={**env, "SHUTTLE_DATA_DIR": str(tmp_path)})
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1, done.stderr
    assert "SHUTTLE_DATABASE_URL" in done.stderr and "SHUTTLE_REDIS_URL" in done.stderr
    assert not (tmp_path / "logs").exists()
