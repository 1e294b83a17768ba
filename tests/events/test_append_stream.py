"""EventService.AppendStream: many logs' batches over one call, each answered by id with its
seqs or its own error while the call goes on."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

import grpc
from google.protobuf.timestamp_pb2 import Timestamp

from shuttle.grpc_client import tenant_metadata
from shuttle.settings import Settings
from shuttle.v1 import common_pb2, events_pb2, events_pb2_grpc

from .conftest import RunningEvents
from .helpers import draft
from .test_grpc_api import FINISH, append, create

if TYPE_CHECKING:
    from shuttle.v1.events_pb2_grpc import EventServiceAsyncStub as Stub

AppendCall = grpc.aio.StreamStreamCall[events_pb2.AppendCall, events_pb2.AppendAnswer]
TRACE_ID = "ab" * 16
LATE = common_pb2.EventDraft(type=draft("PROGRESS").type, timestamp=Timestamp(seconds=10**12))


class Appender:
    """One AppendStream call; batches are numbered in the order the test sends them."""

    def __init__(self, stub: Stub, tenant: str = "") -> None:
        self._outbox: asyncio.Queue[events_pb2.AppendCall | None] = asyncio.Queue()
        metadata = tenant_metadata(tenant) if tenant else None
        self.call: AppendCall = stub.AppendStream(self._drain(), metadata=metadata)
        self._sent = 0

    async def _drain(self) -> AsyncIterator[events_pb2.AppendCall]:
        while (call := await self._outbox.get()) is not None:
            yield call

    def send(
        self,
        workflow_id: str,
        *drafts: common_pb2.EventDraft,
        tenant: str = "t1",
        producer: str = "",
        batch_seq: int = 0,
        traceparent: str = "",
        lease_epoch: int = 0,
    ) -> int:
        self._sent += 1
        request = events_pb2.AppendRequest(
            workflow_id=workflow_id,
            tenant_id=tenant,
            events=drafts or [draft("PROGRESS")],
            producer_id=producer,
            batch_seq=batch_seq,
            lease_epoch=lease_epoch,
        )
        self._outbox.put_nowait(
            events_pb2.AppendCall(id=self._sent, request=request, traceparent=traceparent)
        )
        return self._sent

    def send_create(self, workflow_id: str = "", tenant: str = "t1", **fields: object) -> int:
        """A CreateWorkflow request as an AppendCall of its own."""
        self._sent += 1
        create = events_pb2.CreateWorkflowRequest(
            tenant_id=tenant,
            workflow_id=workflow_id,
            **fields,  # type: ignore[arg-type]
        )
        self._outbox.put_nowait(events_pb2.AppendCall(id=self._sent, create=create))
        return self._sent

    async def answers(self, count: int) -> dict[int, events_pb2.AppendAnswer]:
        found: dict[int, events_pb2.AppendAnswer] = {}
        async with asyncio.timeout(30):
            while len(found) < count:
                answer = await self.call.read()
                assert isinstance(answer, events_pb2.AppendAnswer), "the call ended early"
                found[answer.id] = answer
        return found

    async def answer(self, call_id: int) -> events_pb2.AppendAnswer:
        (answer,) = (await self.answers(1)).values()
        assert answer.id == call_id
        return answer

    async def close(self) -> None:
        self._outbox.put_nowait(None)
        async with asyncio.timeout(30):
            assert await self.call.read() is grpc.aio.EOF  # every answer was taken
        assert await self.call.code() == grpc.StatusCode.OK


async def stored(stub: Stub, workflow_id: str) -> list[common_pb2.Event]:
    page = await stub.List(
        events_pb2.ListRequest(workflow_id=workflow_id, tenant_id="t1", limit=1000)
    )
    return list(page.events)


async def test_batches_of_many_logs_over_one_call_get_their_seqs(stub: Stub) -> None:
    workflows = [f"wf-{n}" for n in range(5)]
    for workflow_id in workflows:
        await create(stub, workflow_id)
    appender = Appender(stub)
    # All sent before any answer: the service handles them together, in any order.
    sent = {appender.send(w, draft("PROGRESS"), draft("PROGRESS")): w for w in workflows * 3}
    answers = await appender.answers(len(sent))
    assert set(answers) == set(sent)
    for workflow_id in workflows:
        seqs = sorted(s for i, a in answers.items() if sent[i] == workflow_id for s in a.seqs)
        assert seqs == list(range(1, 7))
        # Each batch's events are consecutive in the log.
        for call_id, answer in answers.items():
            if sent[call_id] == workflow_id:
                assert answer.seqs[1] == answer.seqs[0] + 1
        assert [e.seq for e in await stored(stub, workflow_id)] == list(range(1, 7))
    await appender.close()


async def test_a_refused_batch_is_answered_with_its_error_and_the_call_goes_on(
    stub: Stub,
) -> None:
    await create(stub, "wf-1")
    await create(stub, "wf-closed")
    await append(stub, *FINISH, workflow_id="wf-closed")
    appender = Appender(stub)
    refused = {
        appender.send("wf-missing"): grpc.StatusCode.NOT_FOUND,
        appender.send("wf-1", tenant="t2"): grpc.StatusCode.NOT_FOUND,  # not t2's to append to
        appender.send("wf-1", tenant=""): grpc.StatusCode.INVALID_ARGUMENT,
        appender.send("wf-1", common_pb2.EventDraft()): grpc.StatusCode.INVALID_ARGUMENT,
        appender.send("wf-1", LATE): grpc.StatusCode.INVALID_ARGUMENT,
        appender.send("wf-closed"): grpc.StatusCode.FAILED_PRECONDITION,
    }
    answers = await appender.answers(len(refused))
    for call_id, code in refused.items():
        assert answers[call_id].error.code == code.value[0], answers[call_id]
        assert answers[call_id].error.message and not answers[call_id].seqs
    # Nothing of those was stored, and the same call still appends.
    accepted = appender.send("wf-1")
    assert list((await appender.answer(accepted)).seqs) == [1]
    assert [e.seq for e in await stored(stub, "wf-1")] == [1]
    await appender.close()


async def test_a_resent_batch_is_answered_with_its_first_seqs(stub: Stub) -> None:
    await create(stub, "wf-1")
    appender = Appender(stub)
    first = appender.send("wf-1", draft("PROGRESS"), producer="run-1", batch_seq=1)
    seqs = list((await appender.answer(first)).seqs)
    again = appender.send("wf-1", draft("PROGRESS"), producer="run-1", batch_seq=1)
    assert list((await appender.answer(again)).seqs) == seqs == [1]
    assert len(await stored(stub, "wf-1")) == 1
    await appender.close()


async def test_the_call_s_tenant_metadata_must_agree_with_each_batch(stub: Stub) -> None:
    await create(stub, "wf-1")
    appender = Appender(stub, tenant="t1")
    other = appender.send("wf-1", tenant="t2")
    answer = await appender.answer(other)
    assert answer.error.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert "differs from the x-shuttle-tenant metadata" in answer.error.message
    unnamed = appender.send("wf-1", tenant="")  # the metadata names the tenant
    assert list((await appender.answer(unnamed)).seqs) == [1]
    await appender.close()


async def test_each_batch_s_events_name_the_trace_of_its_producer(stub: Stub) -> None:
    await create(stub, "wf-1")
    appender = Appender(stub)
    traced = appender.send("wf-1", traceparent=f"00-{TRACE_ID}-{'cd' * 8}-01")
    await appender.answer(traced)
    stamped = appender.send(
        "wf-1", common_pb2.EventDraft(type=draft("PROGRESS").type, trace_id="ef" * 16)
    )
    await appender.answer(stamped)
    assert [e.trace_id for e in await stored(stub, "wf-1")] == [TRACE_ID, "ef" * 16]
    # A traceparent that names no trace is no reason to refuse the batch, nor one to name
    # another batch's trace.
    garbled = appender.send("wf-1", traceparent="00-not-a-trace")
    assert (await appender.answer(garbled)).seqs == [3]
    assert (await stored(stub, "wf-1"))[-1].trace_id not in (TRACE_ID, "ef" * 16)
    await appender.close()


async def test_a_service_that_exports_spans_names_the_producers_trace_too(
    settings: Settings,
) -> None:
    running = RunningEvents(settings.model_copy(update={"otel_traces_exporter": "otlp"}))
    await running.start()
    try:
        async with grpc.aio.insecure_channel(running.target) as channel:
            stub = events_pb2_grpc.EventServiceStub(channel)
            await create(stub, "wf-1")
            appender = Appender(stub)
            await appender.answer(appender.send("wf-1", traceparent=f"00-{TRACE_ID}-{'cd' * 8}-01"))
            assert [e.trace_id for e in await stored(stub, "wf-1")] == [TRACE_ID]
            await appender.close()
    finally:
        await running.stop()
