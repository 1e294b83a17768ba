"""A run outlives the executor that started it: handed over on shutdown, it is claimed by
another replica, which goes on from its log and ends it as an uninterrupted run would.

Two run managers (two replicas) on the real events, tools and planner services; the model is
deterministic in the conversation, so a call made again gets the same reply.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from services.executor.adapters.events import GrpcRunLeases, GrpcWorkflowLog
from services.executor.commands.desk import CommandDesk, ControlAction
from services.executor.lease import Leasing
from services.executor.ports import RunRequest
from services.executor.runs import RunManager, RunsStopping
from shuttle.events_client import EventsClient
from shuttle.llm.openai_model import OpenAIModel
from shuttle.v1 import common_pb2, tools_pb2, tools_pb2_grpc
from tests.executor.conftest import (
    TENANT,
    Backends,
    first,
    of_type,
    running_backends,
    types_of,
)
from tests.executor.test_run_lease import HeldLeases
from tests.support.holding_model import until
from tests.support.takeover_model import TakeoverModel
from tests.tools.approval_support import HOOKS_GATING_CALCULATOR

LEASE_SECONDS = 1.5
POLL_SECONDS = 0.2
QUERY = "Compute a few products"


def replica(backends: Backends, model: TakeoverModel, owner: str, **kw: Any) -> RunManager:
    llm = OpenAIModel(model.base_url, "test-key", "scripted-model", 60.0, 0)
    leasing = Leasing(
        GrpcRunLeases(backends.client),
        owner,
        LEASE_SECONDS,
        takeover_poll_seconds=POLL_SECONDS,
        max_takeovers=kw.pop("max_takeovers", 3),
    )
    return backends.run_manager(llm, leasing=leasing, **kw)


@pytest.fixture
def model(request: pytest.FixtureRequest) -> Iterator[TakeoverModel]:
    started = TakeoverModel(**getattr(request, "param", {}))
    started.start()
    yield started
    started.release()
    started.stop()


@pytest.fixture
async def replicas(
    backends: Backends, model: TakeoverModel
) -> AsyncIterator[tuple[RunManager, RunManager]]:
    a, b = replica(backends, model, "replica-a"), replica(backends, model, "replica-b")
    yield a, b
    for runs in (a, b):
        await runs.shutdown()


async def uninterrupted(backends: Backends, model: TakeoverModel) -> list[dict[str, Any]]:
    model.release()
    return await backends.run_to_end(replica(backends, model, "replica-c"), QUERY)


def check_one_run(events: list[dict[str, Any]]) -> dict[str, Any]:
    """What every run taken over keeps to; its ERROR_RECOVERY's payload."""
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert types_of(events)[-2:] == ["WORKFLOW_COMPLETED", "STREAM_END"]
    observed = [e["payload"]["call_id"] for e in of_type(events, "TOOL_OBSERVATION")]
    assert len(observed) == len(set(observed)), "one observation per call id"
    invoked = [e["payload"]["call_id"] for e in of_type(events, "TOOL_INVOKED")]
    assert sorted(invoked) == sorted(observed)
    (resumed,) = [
        e["payload"]
        for e in of_type(events, "ERROR_RECOVERY")
        if e["payload"].get("recovery_action") == "resumed"
    ]
    assert resumed["error_type"] == "EXECUTOR_LOST"
    # Usage covers the whole run, both owners' model calls and the planner's for the run
    # (routing it, choosing its tools), each counted once.
    spent = sum(e["payload"]["usage"]["total_tokens"] for e in of_type(events, "LLM_OUTPUT"))
    spent += first(events, "WORKFLOW_STARTED")["payload"]["routing"]["usage"]["total_tokens"]
    spent += sum(
        e["payload"]["usage"]["total_tokens"]
        for e in of_type(events, "STATUS_UPDATE")
        if e["payload"].get("phase") == "tools_selected"
    )
    assert first(events, "WORKFLOW_COMPLETED")["payload"]["total_tokens"] == spent
    return dict(resumed)


@pytest.mark.parametrize("model", [{"hold_loop_at": 2}], indirect=True)
async def test_a_run_handed_over_mid_call_goes_on_elsewhere(
    backends: Backends, model: TakeoverModel, replicas: tuple[RunManager, RunManager]
) -> None:
    a, b = replicas
    workflow_id = await a.start(RunRequest(QUERY, TENANT))
    await until(lambda: model.held == 1, "the third model call to be held")
    await a.shutdown()
    assert a.active_runs == 0
    b.start_takeovers()
    model.release()
    events = await backends.read_log(workflow_id)

    resumed = check_one_run(events)
    assert resumed["handed_over"] is True and resumed["lost_owner"] == "replica-a"
    assert resumed["owner"] == "replica-b" and resumed["attempt"] == 0
    recovery_seq = next(e["seq"] for e in events if e["type"] == "ERROR_RECOVERY")
    assert resumed["from_seq"] == recovery_seq
    assert first(events, "WORKFLOW_STARTED")["payload"]["executor"] == "replica-a"
    calls = [e["payload"]["call_id"] for e in of_type(events, "TOOL_INVOKED")]
    assert calls == ["agent-main.1.0", "agent-main.2.0", "agent-main.3.0"]
    alone = await uninterrupted(backends, model)
    assert (
        first(events, "WORKFLOW_COMPLETED")["payload"]["result"]
        == (first(alone, "WORKFLOW_COMPLETED")["payload"]["result"])
    )
    assert first(events, "WORKFLOW_COMPLETED")["payload"]["tools_invoked"] == 3


@pytest.mark.parametrize("model", [{"hold_stream_after": 3}], indirect=True)
async def test_an_answer_cut_short_is_streamed_again_from_the_start(
    backends: Backends, model: TakeoverModel, replicas: tuple[RunManager, RunManager]
) -> None:
    a, b = replicas
    workflow_id = await a.start(RunRequest(QUERY, TENANT))
    await until(lambda: model.held == 1, "the answer to be held after three deltas")
    # Sent by the model is not yet read by the run: its owner stops only once they are logged.
    await backends.first_event(
        workflow_id, lambda e: e["type"] == "THREAD_MESSAGE_DELTA" and e["payload"]["index"] == 2
    )
    await a.shutdown()
    b.start_takeovers()
    model.release()
    events = await backends.read_log(workflow_id)

    check_one_run(events)
    restarted = next(e["seq"] for e in events if e["payload"].get("kind") == "answer_restarted")
    deltas = [e for e in of_type(events, "THREAD_MESSAGE_DELTA") if e["seq"] > restarted]
    assert [d["payload"]["index"] for d in deltas] == list(range(len(deltas)))
    before = [e for e in of_type(events, "THREAD_MESSAGE_DELTA") if e["seq"] < restarted]
    assert [d["payload"]["index"] for d in before] == [0, 1, 2]
    (completed,) = of_type(events, "THREAD_MESSAGE_COMPLETED")
    assert completed["seq"] > restarted
    assert completed["payload"]["content"] == "".join(d["payload"]["delta"] for d in deltas)
    assert completed["payload"]["content"].startswith(f"Answer to Question: {QUERY}")


@pytest.mark.parametrize("model", [{"hold_loop_at": 1}], indirect=True)
async def test_a_paused_run_stays_paused_until_resumed_on_its_new_replica(
    backends: Backends, model: TakeoverModel, replicas: tuple[RunManager, RunManager]
) -> None:
    a, b = replicas
    workflow_id = await a.start(RunRequest(QUERY, TENANT))
    await until(lambda: model.held == 1, "the second model call to be held")
    # Any replica takes commands; the run's owner sees them on its log.
    commands = CommandDesk(GrpcWorkflowLog(backends.client), lambda *_: None)
    await commands.control(workflow_id, TENANT, ControlAction.PAUSE)
    model.release()
    await backends.first_event(workflow_id, lambda e: e["type"] == "WORKFLOW_PAUSED")
    await a.shutdown()
    b.start_takeovers()
    await backends.first_event(workflow_id, lambda e: e["type"] == "ERROR_RECOVERY")
    assert (await backends.workflow(workflow_id)).status == common_pb2.WORKFLOW_STATUS_PAUSED
    await commands.control(workflow_id, TENANT, ControlAction.RESUME)
    events = await backends.read_log(workflow_id)

    check_one_run(events)
    assert types_of(events).count("WORKFLOW_PAUSED") == 1
    paused = first(events, "WORKFLOW_PAUSED")["seq"]
    resumed = first(events, "WORKFLOW_RESUMED")["seq"]
    assert not [e for e in of_type(events, "LLM_OUTPUT") if paused < e["seq"] < resumed]


@pytest.mark.parametrize("model", [{"hold_loop_at": 1, "hold_stream_after": 2}], indirect=True)
async def test_an_owner_whose_lease_lapsed_is_fenced(
    backends: Backends, model: TakeoverModel, caplog: pytest.LogCaptureFixture
) -> None:
    # The owner's renewals reach an events service that never answers them: its lease
    # lapses while it holds the run, as a stalled executor's does.
    leases = HeldLeases()
    server = grpc.aio.server()
    leases.register(server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    llm = OpenAIModel(model.base_url, "test-key", "scripted-model", 60.0, 0)
    stalled = backends.run_manager(
        llm,
        leasing=Leasing(GrpcRunLeases(EventsClient(channel)), "replica-a", LEASE_SECONDS),
    )
    b = replica(backends, model, "replica-b")
    try:
        workflow_id = await stalled.start(RunRequest(QUERY, TENANT))
        await until(lambda: model.held == 1, "the second model call to be held")
        b.start_takeovers()
        await until(lambda: model.held == 2, "the new owner's answer to be held")
        model.loop_gate.open()  # the old owner's reply comes back: its append is fenced
        await until(lambda: stalled.active_runs == 0, "the old owner to stop the run")
        model.stream_gate.open()
        events = await backends.read_log(workflow_id)
    finally:
        leases.release.set()
        await b.shutdown()
        await channel.close()
        await server.stop(grace=None)

    check_one_run(events)
    assert "another executor took it over" in caplog.text
    outputs = of_type(events, "LLM_OUTPUT")
    loop_outputs = [e for e in outputs if e["payload"]["phase"] == "tool_loop"]
    iterations = {e["payload"]["iteration"] for e in of_type(events, "AGENT_THINKING")}
    assert len(loop_outputs) == len(iterations), "the old owner's reply is not on the log"


@pytest.fixture
async def gated(tmp_path: Path) -> AsyncIterator[Backends]:
    async with running_backends(tmp_path, tool_hooks=HOOKS_GATING_CALCULATOR) as started:
        yield started


@pytest.mark.parametrize("model", [{"tool_steps": 1}], indirect=True)
async def test_a_tool_call_waiting_at_the_hand_over_runs_once(
    gated: Backends, model: TakeoverModel
) -> None:
    a, b = replica(gated, model, "replica-a"), replica(gated, model, "replica-b")
    try:
        workflow_id = await a.start(RunRequest(QUERY, TENANT))
        requested = await gated.first_event(
            workflow_id, lambda e: e["type"] == "APPROVAL_REQUESTED"
        )
        await a.shutdown()  # TOOL_INVOKED is out, its TOOL_OBSERVATION is not
        b.start_takeovers()
        await gated.first_event(workflow_id, lambda e: e["type"] == "ERROR_RECOVERY")
        # The new owner sends the call again under its id: the tools service's ledger joins
        # it to the call waiting for approval, which the decision lets run once.
        tools = tools_pb2_grpc.ToolServiceStub(gated.channels[1])
        await tools.DecideApproval(
            tools_pb2.DecideApprovalRequest(
                approval_id=requested["payload"]["approval_id"],
                tenant_id=TENANT,
                decision="approved",
                decided_by="operator",
            )
        )
        events = await gated.read_log(workflow_id)
    finally:
        await b.shutdown()

    check_one_run(events)
    assert types_of(events).count("APPROVAL_REQUESTED") == 1
    (invoked,) = of_type(events, "TOOL_INVOKED")
    (observed,) = of_type(events, "TOOL_OBSERVATION")
    assert invoked["payload"]["call_id"] == observed["payload"]["call_id"] == "agent-main.1.0"
    assert observed["seq"] > first(events, "ERROR_RECOVERY")["seq"]
    assert observed["payload"]["result"] == "7"


class RenewalsElsewhere:
    """The replica's run leases, their renewals sent to another events service (one that
    never answers them): its own lease lapses while it holds the run."""

    def __init__(self, renewals: GrpcRunLeases, leases: GrpcRunLeases) -> None:
        self.renew = renewals.renew
        self.release = leases.release
        self.claim = leases.claim


@pytest.mark.parametrize("model", [{"hold_loop_at": 1}], indirect=True)
async def test_a_replica_that_claims_its_own_run_back_goes_on_from_the_log(
    backends: Backends, model: TakeoverModel
) -> None:
    held = HeldLeases()
    server = grpc.aio.server()
    held.register(server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    leases = RenewalsElsewhere(GrpcRunLeases(EventsClient(channel)), GrpcRunLeases(backends.client))
    llm = OpenAIModel(model.base_url, "test-key", "scripted-model", 60.0, 0)
    leasing = Leasing(leases, "replica-a", LEASE_SECONDS, takeover_poll_seconds=POLL_SECONDS)
    runs = backends.run_manager(llm, leasing=leasing)
    try:
        workflow_id = await runs.start(RunRequest(QUERY, TENANT))
        await until(lambda: model.held == 1, "the second model call to be held")
        runs.start_takeovers()
        await backends.first_event(workflow_id, lambda e: e["type"] == "ERROR_RECOVERY")
        model.release()
        events = await backends.read_log(workflow_id)
    finally:
        held.release.set()
        await runs.shutdown()
        await channel.close()
        await server.stop(grace=None)

    resumed = check_one_run(events)
    assert resumed["owner"] == resumed["lost_owner"] == "replica-a"
    assert resumed["handed_over"] is False


async def test_a_stopping_replica_starts_no_run(backends: Backends, model: TakeoverModel) -> None:
    runs = replica(backends, model, "replica-a")
    await runs.shutdown()
    with pytest.raises(RunsStopping, match="another replica"):
        await runs.start(RunRequest(QUERY, TENANT))


@pytest.mark.parametrize("model", [{"hold_loop_at": 1}], indirect=True)
async def test_a_run_taken_over_keeps_the_deadline_it_started_with(
    backends: Backends, model: TakeoverModel
) -> None:
    patient = replica(backends, model, "replica-a")
    strict = replica(backends, model, "replica-b", run_timeout_seconds=1.0)
    try:
        workflow_id = await patient.start(RunRequest(QUERY, TENANT))
        await until(lambda: model.held == 1, "the second model call to be held")
        started = await backends.first_event(workflow_id, lambda e: e["type"] == "WORKFLOW_STARTED")
        assert started["payload"]["executor"] == "replica-a"
        # Longer than replica-b's timeout since the run started (not since it is taken over).
        await asyncio.sleep(1.5)
        await patient.shutdown()
        strict.start_takeovers()
        model.release()
        events = await backends.read_log(workflow_id)
    finally:
        await patient.shutdown()
        await strict.shutdown()

    check_one_run(events)
    timeout = next(e for e in events if e["payload"].get("error_type") == "TIMEOUT")
    assert timeout["payload"]["fatal"] is False
    assert first(events, "ERROR_RECOVERY")["seq"] < timeout["seq"]
    # Out of time already: the run answered from what it had, with no further loop call.
    assert not [
        e
        for e in events
        if e["type"] == "LLM_OUTPUT"
        and e["seq"] > timeout["seq"]
        and e["payload"]["phase"] == "tool_loop"
    ]
    assert first(events, "WORKFLOW_COMPLETED")["payload"]["result"]
