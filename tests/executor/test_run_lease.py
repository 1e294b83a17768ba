"""The executor holds its run's lease for the whole run, and stops a run ended without it."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

import grpc

from services.executor.adapters.events import GrpcRunLeases
from services.executor.lease import Leasing
from services.executor.ports import RunRequest
from services.executor.runs import RunManager
from shuttle.envelope import type_value
from shuttle.events_client import EventsClient
from shuttle.llm.openai_model import OpenAIModel
from shuttle.v1 import common_pb2, events_pb2
from tests.executor.conftest import TENANT, Backends, first, types_of
from tests.executor.test_control import gated_script, held_at_work
from tests.support.agent_model import AgentModel, answer, calc
from tests.support.scripted_openai import ScriptedOpenAI

OWNER = "executor-under-test"
LEASE_SECONDS = 0.6


async def eventually(
    condition: Callable[[], Awaitable[bool]], what: str, within_seconds: float = 30
) -> None:
    deadline = time.monotonic() + within_seconds
    while not await condition():
        assert time.monotonic() < deadline, f"gave up waiting: {what}"
        await asyncio.sleep(0.05)


def leased_runs(backends: Backends, server: ScriptedOpenAI) -> RunManager:
    # The model call outlasts the test's patience: only the lease can stop a held run.
    llm = OpenAIModel(server.base_url, "test-key", "scripted-model", 120.0, 0)
    leasing = Leasing(GrpcRunLeases(backends.client), OWNER, LEASE_SECONDS)
    return backends.run_manager(llm, completion_check=False, leasing=leasing)


async def test_a_run_renews_its_lease_until_it_ends(
    backends: Backends, model: ScriptedOpenAI
) -> None:
    script, gate = gated_script()
    model.set_handler(script)
    runs = leased_runs(backends, model)
    workflow_id = await runs.start(RunRequest(query="1+1, 2+2", tenant_id=TENANT))
    await held_at_work(backends, gate, workflow_id)
    first = await backends.workflow(workflow_id)
    assert first.lease_owner == OWNER

    async def renewed() -> bool:
        now = await backends.workflow(workflow_id)
        return now.lease_expires_at.ToNanoseconds() > first.lease_expires_at.ToNanoseconds()

    await eventually(renewed, "the lease to be renewed while the model call is held")
    gate.release.set()
    events = await backends.read_log(workflow_id)

    assert types_of(events)[-2:] == ["WORKFLOW_COMPLETED", "STREAM_END"]
    assert "ERROR_OCCURRED" not in types_of(events)
    ended = await backends.workflow(workflow_id)
    assert ended.status == common_pb2.WORKFLOW_STATUS_COMPLETED
    assert ended.lease_owner == OWNER and not ended.HasField("lease_expires_at")


async def test_a_run_ended_without_its_executor_is_stopped_quietly(
    backends: Backends, model: ScriptedOpenAI
) -> None:
    script, gate = gated_script()
    model.set_handler(script)
    runs = leased_runs(backends, model)
    workflow_id = await runs.start(RunRequest(query="1+1, 2+2", tenant_id=TENANT))
    await held_at_work(backends, gate, workflow_id)

    # What the events service does when it judges the executor lost.
    payload = {"error_type": "EXECUTOR_LOST", "error_message": "lost", "fatal": True}
    await backends.events.Append(
        events_pb2.AppendRequest(
            workflow_id=workflow_id,
            tenant_id=TENANT,
            events=[
                common_pb2.EventDraft(
                    type=type_value("ERROR_OCCURRED"), payload_json=json.dumps(payload)
                )
            ],
        )
    )

    async def stopped() -> bool:
        return runs.active_runs == 0

    # The run stops on its next renewal, while its model call is still held (the gate gives
    # up after 30 s).
    await eventually(stopped, "the run to stop once its renewal is refused", 20)
    gate.release.set()
    events = await backends.read_log(workflow_id)
    assert types_of(events)[-2:] == ["ERROR_OCCURRED", "STREAM_END"]
    assert [e["payload"].get("error_type") for e in events if e["type"] == "ERROR_OCCURRED"] == [
        "EXECUTOR_LOST"
    ]
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert (await backends.workflow(workflow_id)).status == common_pb2.WORKFLOW_STATUS_FAILED


class HeldLeases:
    """An events service whose RenewLease answers only once released (its only method)."""

    def __init__(self) -> None:
        self.asked = asyncio.Event()
        self.release = asyncio.Event()

    async def renew_lease(
        self, request: events_pb2.RenewLeaseRequest, _context: grpc.aio.ServicerContext[Any, Any]
    ) -> events_pb2.Workflow:
        self.asked.set()
        await self.release.wait()
        return events_pb2.Workflow(workflow_id=request.workflow_id)

    def register(self, server: grpc.aio.Server) -> None:
        renew = grpc.unary_unary_rpc_method_handler(
            self.renew_lease,
            request_deserializer=events_pb2.RenewLeaseRequest.FromString,
            response_serializer=events_pb2.Workflow.SerializeToString,
        )
        service = events_pb2.DESCRIPTOR.services_by_name["EventService"].full_name
        server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(service, {"RenewLease": renew}),)
        )


async def test_a_run_does_not_renew_the_lease_it_was_just_granted(
    backends: Backends, model: ScriptedOpenAI
) -> None:
    model.set_handler(AgentModel(calc("1+1"), answer("2"), synthesis="It is 2."))
    llm = OpenAIModel(model.base_url, "test-key", "scripted-model", 120.0, 0)
    leases = HeldLeases()
    server = grpc.aio.server()
    leases.register(server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    try:
        # CreateWorkflow leased the workflow to the executor: the first renewal is due a
        # third of the (hour-long) lease later, long after this run has ended.
        leasing = Leasing(GrpcRunLeases(EventsClient(channel)), OWNER, 3600)
        runs = backends.run_manager(llm, completion_check=False, leasing=leasing)
        async with asyncio.timeout(60):
            events = await backends.run_to_end(runs, "1+1")
    finally:
        leases.release.set()
        await channel.close()
        await server.stop(grace=None)
    assert not leases.asked.is_set()
    assert types_of(events)[-2:] == ["WORKFLOW_COMPLETED", "STREAM_END"]
    assert "It is 2." in first(events, "THREAD_MESSAGE_COMPLETED")["payload"]["content"]
