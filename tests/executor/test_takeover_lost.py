"""Runs whose executor is lost: killed (-9) or stalled (SIGSTOP) while its run waits for the
model. The run's lease lapses, another replica claims it and goes on; a stalled executor
that wakes up is fenced and stops without appending; past the takeover limit the run ends
as lost. The executor that loses the run is a process of its own (the test's replica is in
process), on the real events, tools and planner services."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from services.executor.runs import RunManager
from shuttle.grpc_client import open_channel
from shuttle.v1 import executor_pb2, executor_pb2_grpc
from tests.executor.conftest import TENANT, Backends, first, of_type, running_backends
from tests.executor.test_takeover import LEASE_SECONDS, POLL_SECONDS, QUERY, check_one_run, replica
from tests.support.holding_model import until
from tests.support.processes import start_service_process, stop_process
from tests.support.takeover_model import TakeoverModel


@pytest.fixture
def model(request: pytest.FixtureRequest) -> Iterator[TakeoverModel]:
    started = TakeoverModel(**getattr(request, "param", {"hold_loop_at": 1}))
    started.start()
    yield started
    started.release()
    started.stop()


@pytest.fixture
async def backends(tmp_path: Path) -> AsyncIterator[Backends]:
    async with running_backends(tmp_path) as started:
        yield started


class LosingExecutor:
    """An executor process that starts the run and is then lost."""

    def __init__(self, backends: Backends, model: TakeoverModel, tmp_path: Path) -> None:
        ports = backends.ports
        env = {
            "SHUTTLE_EVENTS_ADDR": f"127.0.0.1:{ports['events']}",
            "SHUTTLE_TOOLS_ADDR": f"127.0.0.1:{ports['tools']}",
            "SHUTTLE_PLANNER_ADDR": f"127.0.0.1:{ports['planner']}",
            "SHUTTLE_DATA_DIR": str(tmp_path),
            "SHUTTLE_DATABASE_URL": "",
            "SHUTTLE_REDIS_URL": "",
            "OPENAI_BASE_URL": model.base_url,
            "OPENAI_API_KEY": "test-key",
            "SHUTTLE_MODEL": model.model,
            "SHUTTLE_RUN_LEASE_SECONDS": str(LEASE_SECONDS),
            "SHUTTLE_RUN_TAKEOVER_POLL_SECONDS": str(POLL_SECONDS),
        }
        self.log_path = tmp_path / "executor.log"
        self.process, self.port = start_service_process("executor", env, self.log_path)

    async def start(self) -> str:
        channel = open_channel(f"127.0.0.1:{self.port}")
        try:
            stub = executor_pb2_grpc.ExecutorServiceStub(channel)
            started = await stub.StartRun(
                executor_pb2.StartRunRequest(query=QUERY, tenant_id=TENANT)
            )
        finally:
            await channel.close()
        return str(started.workflow_id)

    def signal(self, number: signal.Signals) -> None:
        os.kill(self.process.pid, number)

    def said(self, text: str) -> bool:
        return text in self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.signal(signal.SIGCONT)
            stop_process(self.process)


@pytest.fixture
def lost(backends: Backends, model: TakeoverModel, tmp_path: Path) -> Iterator[LosingExecutor]:
    executor = LosingExecutor(backends, model, tmp_path)
    yield executor
    executor.stop()


async def owned_by(runs: RunManager, backends: Backends, workflow_id: str) -> list[dict[str, Any]]:
    runs.start_takeovers()
    try:
        return await backends.read_log(workflow_id)
    finally:
        await runs.shutdown()


async def test_a_killed_executors_run_is_taken_over_after_its_lease_lapses(
    backends: Backends, model: TakeoverModel, lost: LosingExecutor
) -> None:
    workflow_id = await lost.start()
    await until(lambda: model.held == 1, "the second model call to be held")
    lost.process.kill()
    lost.process.wait()
    events = await owned_by(replica(backends, model, "replica-b"), backends, workflow_id)

    resumed = check_one_run(events)
    assert resumed["handed_over"] is False and resumed["attempt"] == 1
    assert resumed["lost_owner"] == first(events, "WORKFLOW_STARTED")["payload"]["executor"]
    assert resumed["owner"] == "replica-b"
    assert first(events, "WORKFLOW_COMPLETED")["payload"]["tools_invoked"] == 3


@pytest.mark.parametrize("model", [{"hold_loop_at": 1, "hold_stream_after": 2}], indirect=True)
async def test_a_stalled_executor_wakes_up_fenced_and_appends_nothing(
    backends: Backends, model: TakeoverModel, lost: LosingExecutor
) -> None:
    workflow_id = await lost.start()
    await until(lambda: model.held == 1, "the second model call to be held")
    lost.signal(signal.SIGSTOP)
    runs = replica(backends, model, "replica-b")
    runs.start_takeovers()
    try:
        # The new owner has gone on to its answer, and holds there.
        await until(lambda: model.held == 2, "the new owner's answer to be held")
        lost.signal(signal.SIGCONT)
        model.loop_gate.open()  # the stalled executor's model call comes back

        def stopped() -> bool:
            return lost.said("took it over") or lost.said("lease was refused")

        await until(stopped, "the stalled executor to stop the run")
        model.stream_gate.open()
        events = await backends.read_log(workflow_id)
    finally:
        await runs.shutdown()

    check_one_run(events)
    loop_outputs = [
        e for e in of_type(events, "LLM_OUTPUT") if e["payload"]["phase"] == "tool_loop"
    ]
    iterations = {e["payload"]["iteration"] for e in of_type(events, "AGENT_THINKING")}
    assert len(loop_outputs) == len(iterations), "the stalled executor's reply is not on the log"


async def test_past_the_takeover_limit_the_run_ends_as_lost(
    backends: Backends, model: TakeoverModel, lost: LosingExecutor
) -> None:
    workflow_id = await lost.start()
    await until(lambda: model.held == 1, "the second model call to be held")
    lost.process.kill()
    lost.process.wait()
    runs = replica(backends, model, "replica-b", max_takeovers=0)
    events = await owned_by(runs, backends, workflow_id)

    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert [e["type"] for e in events][-2:] == ["ERROR_OCCURRED", "STREAM_END"]
    failure = events[-2]["payload"]
    assert failure["fatal"] is True and failure["error_type"] == "EXECUTOR_LOST"
    assert failure["attempt"] == 1 and failure["max_attempts"] == 0
    assert "ERROR_RECOVERY" not in [e["type"] for e in events]


async def test_sigterm_hands_the_run_over_at_once(
    backends: Backends, model: TakeoverModel, lost: LosingExecutor
) -> None:
    workflow_id = await lost.start()
    await until(lambda: model.held == 1, "the second model call to be held")
    lost.signal(signal.SIGTERM)
    assert await asyncio.to_thread(lost.process.wait, 30) == 0
    # Released, not lapsed: claimable at once, and not counted as a takeover.
    runs = replica(backends, model, "replica-b", max_takeovers=0)
    events = await owned_by(runs, backends, workflow_id)

    resumed = check_one_run(events)
    assert resumed["handed_over"] is True and resumed["attempt"] == 0
    assert lost.said("run handed over")
