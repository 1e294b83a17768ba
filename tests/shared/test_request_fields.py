"""The request-reads analysis (tests/support/request_reads.py) on servicers small enough
to see what it must find: a field left unread, a stream followed into nested messages, a
oneof branch, a request the analysis cannot follow."""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator

from google.protobuf.descriptor import MethodDescriptor

from shuttle.v1 import events_pb2, executor_pb2
from tests.support.request_reads import request_reads, unread_fields


def _unread(rpc: MethodDescriptor, servicer: type) -> list[str]:
    reads = request_reads(servicer, rpc)
    assert not reads.lost, f"the analysis loses the request: {reads.lost}"
    return [".".join(path) for path in unread_fields(rpc.input_type, reads)]


_GET_RUN = executor_pb2.DESCRIPTOR.services_by_name["ExecutorService"].methods_by_name["GetRun"]
_EVENTS = events_pb2.DESCRIPTOR.services_by_name["EventService"]


def _tenant_of(request: executor_pb2.GetRunRequest) -> str:
    return str(getattr(request, "tenant_id"))  # noqa: B009 - the spelling under test


class _ForgetfulServicer:
    async def GetRun(self, request: executor_pb2.GetRunRequest, context: object) -> str:
        return self._workflow(request)

    def _workflow(self, request: executor_pb2.GetRunRequest) -> str:
        return request.workflow_id


class _CarefulServicer(_ForgetfulServicer):
    async def GetRun(self, request: executor_pb2.GetRunRequest, context: object) -> str:
        return self._workflow(request) + _tenant_of(request)


class _StreamServicer:
    async def AppendStream(
        self, request_iterator: AsyncIterable[events_pb2.AppendCall], context: object
    ) -> AsyncIterator[int]:
        def answer(call: events_pb2.AppendCall) -> int:
            drafts = [draft.type for draft in call.request.events if draft.HasField("timestamp")]
            return call.id + len(drafts) + len(call.request.workflow_id)

        async for call in request_iterator:
            yield answer(call)


class _WatchingServicer:
    async def FollowCommands(
        self, request_iterator: AsyncIterable[events_pb2.CommandWatch], context: object
    ) -> AsyncIterator[str]:
        async for request in request_iterator:
            if request.WhichOneof("action") == "watch":
                yield f"{request.watch.workflow_id}@{request.watch.from_seq}"


class _HoardingServicer:
    def __init__(self) -> None:
        self.kept: list[executor_pb2.GetRunRequest] = []

    async def GetRun(self, request: executor_pb2.GetRunRequest, context: object) -> None:
        self.kept.append(request)


def test_the_analysis_finds_the_field_a_helper_leaves_unread() -> None:
    assert _unread(_GET_RUN, _ForgetfulServicer) == ["tenant_id"]
    assert _unread(_GET_RUN, _CarefulServicer) == []


def test_the_analysis_follows_a_request_stream_into_nested_messages() -> None:
    unread = _unread(_EVENTS.methods_by_name["AppendStream"], _StreamServicer)
    assert unread == [
        "request.tenant_id",
        "request.events.agent_id",
        "request.events.message",
        "request.events.payload_json",
        "request.events.trace_id",
        "request.producer_id",
        "request.batch_seq",
        "traceparent",
    ]


def test_the_analysis_reports_a_request_it_cannot_follow() -> None:
    reads = request_reads(_HoardingServicer, _GET_RUN)
    assert len(reads.lost) == 1
    assert "test_request_fields.py" in reads.lost[0]
    assert "self.kept.append" in reads.lost[0]


def test_a_oneof_branch_counts_when_the_handler_names_it() -> None:
    unread = _unread(_EVENTS.methods_by_name["FollowCommands"], _WatchingServicer)
    assert unread == ["watch.tenant_id", "unwatch"]
