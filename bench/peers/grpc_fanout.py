"""The peer for emit -> subscriber latency over gRPC: a bare grpc.aio fan-out, in memory.

It answers the calls events_latency makes (CreateWorkflow, Append, AppendStream, Stream,
StreamBatches) with the events service's own messages, but keeps each log in a list: no SQL,
no validation, no hot tier, no tracing or metrics. Each event is serialized once and a
subscriber's message is a join of those bytes, as the events service does. So the same
subscribers measure what gRPC in Python alone reaches on this machine. Readers are woken as
the events service wakes its own (`shuttle.paced_signal`, `--seconds-per-reader`), or on
every append with 0.

    .venv/bin/python -m bench.peers.grpc_fanout --port PORT [--seconds-per-reader S]
"""

from __future__ import annotations

import argparse
import asyncio
import uuid
from collections.abc import AsyncIterable, AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2_grpc

from services.events.wire import EVENTS_TAG, SERVICE_NAME, varint
from shuttle.envelope import TERMINAL_TYPES, type_value
from shuttle.paced_signal import DEFAULT_SECONDS_PER_WAITER, PacedSignal
from shuttle.v1 import common_pb2, events_pb2

_END_TYPES = {type_value(name) for name in TERMINAL_TYPES}
_STREAM_END = type_value("STREAM_END")


@dataclass
class Log:
    signal: PacedSignal
    events: list[bytes] = field(default_factory=list)
    """Each serialized Event."""
    framed: list[bytes] = field(default_factory=list)
    """Each event as a one-event EventBatch: those join into a larger one."""
    ended: bool = False


class FanoutPeer:
    def __init__(self, seconds_per_reader: float) -> None:
        self._per_reader = seconds_per_reader
        self._logs: dict[str, Log] = {}

    async def CreateWorkflow(self, request: Any, context: Any) -> events_pb2.Workflow:
        workflow_id = f"wf-{uuid.uuid4().hex}"
        self._logs[workflow_id] = Log(PacedSignal(self._per_reader))
        return events_pb2.Workflow(workflow_id=workflow_id)

    async def Append(self, request: events_pb2.AppendRequest, context: Any) -> Any:
        return events_pb2.AppendResponse(seqs=self._append(request))

    async def AppendStream(
        self, calls: AsyncIterable[events_pb2.AppendCall], context: Any
    ) -> AsyncIterator[events_pb2.AppendAnswer]:
        async for call in calls:
            yield events_pb2.AppendAnswer(id=call.id, seqs=self._append(call.request))

    async def Stream(self, request: events_pb2.StreamRequest, context: Any) -> AsyncIterator[bytes]:
        log = self._logs[request.workflow_id]
        async for first, last in self._follow(request):
            for encoded in log.events[first:last]:
                yield encoded

    async def StreamBatches(
        self, request: events_pb2.StreamRequest, context: Any
    ) -> AsyncIterator[bytes]:
        log = self._logs[request.workflow_id]
        async for first, last in self._follow(request):
            yield b"".join(log.framed[first:last])

    async def _follow(self, request: events_pb2.StreamRequest) -> AsyncIterator[tuple[int, int]]:
        """Index ranges of the log's events, each what came since the last, until the end."""
        log = self._logs[request.workflow_id]
        cursor = max(request.from_seq, 1) - 1
        log.signal.readers += 1
        try:
            while True:
                while cursor >= len(log.events) and not log.ended:
                    await log.signal.wait()
                held = len(log.events)
                if held > cursor:
                    yield cursor, held
                cursor = held
                if log.ended:
                    return
                await log.signal.pace()
        finally:
            log.signal.readers -= 1

    def _append(self, request: events_pb2.AppendRequest) -> list[int]:
        log = self._logs[request.workflow_id]
        seqs: list[int] = []
        types = [draft.type for draft in request.events]
        if any(kind in _END_TYPES for kind in types):
            types.append(_STREAM_END)
        for index, kind in enumerate(types):
            seq = len(log.framed) + 1
            draft = request.events[index] if index < len(request.events) else None
            event = common_pb2.Event(
                workflow_id=request.workflow_id,
                type=kind,
                seq=seq,
                payload_json=draft.payload_json if draft else "",
            )
            encoded = event.SerializeToString()
            log.events.append(encoded)
            log.framed.append(EVENTS_TAG + varint(len(encoded)) + encoded)
            if draft is not None:
                seqs.append(seq)
        if _STREAM_END in types:
            log.ended = True
            log.signal.wake_now()
        else:
            log.signal.notify()
        return seqs


async def serve(port: int, seconds_per_reader: float) -> None:
    peer = FanoutPeer(seconds_per_reader)
    unary = grpc.unary_unary_rpc_method_handler
    handlers: dict[str, grpc.RpcMethodHandler[Any, Any]] = {
        "CreateWorkflow": unary(
            peer.CreateWorkflow,
            request_deserializer=events_pb2.CreateWorkflowRequest.FromString,
            response_serializer=events_pb2.Workflow.SerializeToString,
        ),
        "Append": unary(
            peer.Append,
            request_deserializer=events_pb2.AppendRequest.FromString,
            response_serializer=events_pb2.AppendResponse.SerializeToString,
        ),
        "AppendStream": grpc.stream_stream_rpc_method_handler(
            peer.AppendStream,
            request_deserializer=events_pb2.AppendCall.FromString,
            response_serializer=events_pb2.AppendAnswer.SerializeToString,
        ),
        "Stream": grpc.unary_stream_rpc_method_handler(
            peer.Stream, request_deserializer=events_pb2.StreamRequest.FromString
        ),
        "StreamBatches": grpc.unary_stream_rpc_method_handler(
            peer.StreamBatches, request_deserializer=events_pb2.StreamRequest.FromString
        ),
    }
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE_NAME, handlers),))
    health_pb2_grpc.add_HealthServicer_to_server(health.aio.HealthServicer(), server)
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    await server.wait_for_termination()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument(
        "--seconds-per-reader",
        type=float,
        default=DEFAULT_SECONDS_PER_WAITER,
        help="wake-up spacing per waiting reader (0: wake every reader on every append)",
    )
    args = parser.parse_args()
    asyncio.run(serve(args.port, args.seconds_per_reader))


if __name__ == "__main__":
    main()
