"""Every field of every request in proto/shuttle/v1 is read by the servicer that serves it.

A field the servicer never reads is accepted from every caller and silently dropped: the
caller believes it asked for something that never happens. Each RPC's handler is checked
for every field of its request message (and of the `shuttle.v1` messages inside it, such as
`AppendRequest.events[].type`); a field may stay unread only on `RESERVED`, with its reason,
and an entry there that is read or no longer exists fails too, so the list cannot rot.

The handlers are read, not run (tests/support/request_reads.py): the analysis sees every
branch, where a recording proxy passed to a running servicer would see only the branches
a given request takes (a field read only on an error path, or only for a non-empty
history, would look unread), and would need each service's real backends to get that far.
The price of reading is that the request can go where the analysis cannot follow (stored
on an object, handed to a library); each such place fails the RPC's test, naming it.
"""

from __future__ import annotations

import importlib
from collections.abc import AsyncIterable, AsyncIterator
from pathlib import Path

import pytest
from google.protobuf.descriptor import MethodDescriptor, ServiceDescriptor

from services.events.grpc_api import EventServiceServicer
from services.executor.grpc_api import ExecutorServicer
from services.planner.grpc_api import PlannerServicer
from services.tools.grpc_api import ToolServiceServicer
from shuttle.v1 import events_pb2, executor_pb2
from tests.support.request_reads import field_paths, request_reads, unread_fields

PROTO_DIR = Path(__file__).resolve().parents[2] / "proto" / "shuttle" / "v1"

SERVICERS: dict[str, type] = {
    "shuttle.v1.EventService": EventServiceServicer,
    "shuttle.v1.ExecutorService": ExecutorServicer,
    "shuttle.v1.PlannerService": PlannerServicer,
    "shuttle.v1.ToolService": ToolServiceServicer,
}
NOT_SERVED: dict[str, str] = {
    "shuttle.v1.ToolProvider": "served by the external tool providers that the tools service "
    "calls; Shuttle is only its client",
}

_TEXT_TURNS = (
    "history holds the session's earlier turns as text (a user or assistant role and its "
    "content, as the gateway sends them); ChatMessage's {field} belongs to the tool loop's "
    "messages (PlannerService.StructuredCall) and a past turn carries none"
)
RESERVED: dict[tuple[str, str], str] = {
    (rpc, f"history.{field}"): _TEXT_TURNS.format(field=field)
    for rpc in ("ExecutorService.StartRun", "ExecutorService.Run")
    for field in ("name", "tool_call_id", "tool_calls")
}
"""Fields an RPC accepts and does not read, by RPC and dotted path, with the reason."""


def _services() -> list[ServiceDescriptor]:
    files = sorted(PROTO_DIR.glob("*.proto"))
    modules = [importlib.import_module(f"shuttle.v1.{path.stem}_pb2") for path in files]
    return [service for m in modules for service in m.DESCRIPTOR.services_by_name.values()]


def _rpc_name(rpc: MethodDescriptor) -> str:
    return f"{rpc.containing_service.name}.{rpc.name}"


RPCS = [rpc for s in _services() if s.full_name in SERVICERS for rpc in s.methods]


def _unread(rpc: MethodDescriptor, servicer: type | None = None) -> list[str]:
    servicer = servicer or SERVICERS[rpc.containing_service.full_name]
    reads = request_reads(servicer, rpc)
    assert not reads.lost, f"the analysis loses {_rpc_name(rpc)}'s request: {reads.lost}"
    return [".".join(path) for path in unread_fields(rpc.input_type, reads)]


def test_every_service_has_its_servicer_or_the_reason_it_has_none() -> None:
    names = [service.full_name for service in _services()]
    assert sorted(names) == sorted([*SERVICERS, *NOT_SERVED])


@pytest.mark.parametrize("rpc", RPCS, ids=_rpc_name)
def test_the_servicer_reads_every_field_of_the_request(rpc: MethodDescriptor) -> None:
    unread = [f for f in _unread(rpc) if (_rpc_name(rpc), f) not in RESERVED]
    assert not unread, (
        f"{_rpc_name(rpc)} accepts {rpc.input_type.name} fields it never reads: "
        f"{', '.join(unread)}; read them, or list them in RESERVED with the reason"
    )


def test_every_reserved_field_exists_and_is_still_unread() -> None:
    rpcs = {_rpc_name(rpc): rpc for rpc in RPCS}
    for rpc_name, field in RESERVED:
        rpc = rpcs.get(rpc_name)
        assert rpc is not None, f"RESERVED names {rpc_name}, which no servicer serves"
        paths = {".".join(path) for path in field_paths(rpc.input_type)}
        assert field in paths, f"RESERVED names {rpc_name}'s {field}, which no longer exists"
        assert field in _unread(rpc), f"{rpc_name} reads {field}: take it off RESERVED"


# The analysis itself, on servicers small enough to see what it must find.

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
        "request.lease_epoch",
        "traceparent",
        "create",
    ]


def test_the_analysis_reports_a_request_it_cannot_follow() -> None:
    reads = request_reads(_HoardingServicer, _GET_RUN)
    assert len(reads.lost) == 1
    assert "test_request_fields.py" in reads.lost[0]
    assert "self.kept.append" in reads.lost[0]


def test_a_oneof_branch_counts_when_the_handler_names_it() -> None:
    unread = _unread(_EVENTS.methods_by_name["FollowCommands"], _WatchingServicer)
    assert unread == ["watch.tenant_id", "unwatch"]
