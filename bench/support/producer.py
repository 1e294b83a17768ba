"""How the benchmarks append: as the executor does, over one EventService.AppendStream call
for the whole process (with `unary`, one Append call per batch, to compare the two)."""

from __future__ import annotations

from shuttle.events_client.append_stream import AppendStream
from shuttle.grpc_client import tenant_metadata
from shuttle.v1 import events_pb2, events_pb2_grpc

TIMEOUT_SECONDS = 120.0


class AppendRefused(Exception):
    """The events service refused or failed a batch."""


class Producer:
    def __init__(self, stub: events_pb2_grpc.EventServiceAsyncStub, unary: bool = False) -> None:
        self._stub = stub
        self._stream = None if unary else AppendStream(stub)

    async def append(self, request: events_pb2.AppendRequest) -> list[int]:
        """The batch's seqs; `request.tenant_id` names the tenant."""
        if self._stream is None:
            metadata = tenant_metadata(request.tenant_id)
            response = await self._stub.Append(request, metadata=metadata)
            return list(response.seqs)
        answer = await self._stream.append(request, TIMEOUT_SECONDS)
        if answer.HasField("error"):
            raise AppendRefused(f"{answer.error.code}: {answer.error.message}")
        return list(answer.seqs)

    async def close(self) -> None:
        if self._stream is not None:
            await self._stream.close()
