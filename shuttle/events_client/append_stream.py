"""The appends of a whole process over one EventService.AppendStream call.

A unary Append costs the events service about twice the CPU of one message on a stream
(gRPC's per-call setup and the interceptors), and every run appends a dozen times or more.
Batches are matched to their answers by id. A batch the events service refuses comes back
with its own error; a broken call fails the batches in flight as unavailable, which their
producers resend under the same batch number (the events service answers a repeat with the
first seqs), and the next batch opens a new call.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import AsyncIterator

import grpc
from opentelemetry.propagate import inject

from shuttle.grpc_client import dropped_by_grpc
from shuttle.v1 import events_pb2, events_pb2_grpc


class AppendStreamBroken(Exception):
    """The call ended before the batch was answered, or the answer did not come in time:
    whether the batch was stored is unknown, so it is resent."""


class AppendStream:
    """One AppendStream call shared by every producer of the process, opened on first use."""

    def __init__(self, stub: events_pb2_grpc.EventServiceAsyncStub) -> None:
        self._stub = stub
        self._outbox: asyncio.Queue[events_pb2.AppendCall | None] | None = None
        self._reader: asyncio.Task[None] | None = None
        self._waiting: dict[int, asyncio.Future[events_pb2.AppendAnswer]] = {}
        self._next_id = 0

    async def append(
        self, request: events_pb2.AppendRequest, timeout_seconds: float
    ) -> events_pb2.AppendAnswer:
        """The batch's answer: its seqs, or the error that refused it. Raises
        AppendStreamBroken (resend)."""
        outbox = self._outbox if self._outbox is not None else self._open()
        self._next_id += 1
        call_id = self._next_id
        answer: asyncio.Future[events_pb2.AppendAnswer] = asyncio.get_running_loop().create_future()
        self._waiting[call_id] = answer
        carrier: dict[str, str] = {}
        inject(carrier)  # the run's trace travels with its batch, not with the call
        outbox.put_nowait(
            events_pb2.AppendCall(
                id=call_id, request=request, traceparent=carrier.get("traceparent", "")
            )
        )
        try:
            return await asyncio.wait_for(answer, timeout_seconds)
        except TimeoutError:
            raise AppendStreamBroken("DEADLINE_EXCEEDED: no answer to the batch in time") from None
        finally:
            self._waiting.pop(call_id, None)

    async def close(self) -> None:
        reader, self._reader = self._reader, None
        self._outbox = None
        if reader is not None:
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)

    def _open(self) -> asyncio.Queue[events_pb2.AppendCall | None]:
        outbox: asyncio.Queue[events_pb2.AppendCall | None] = asyncio.Queue()
        self._outbox = outbox
        # A context of its own: the call outlives the run whose batch opened it.
        self._reader = asyncio.create_task(
            self._read(outbox), name="append-stream", context=contextvars.Context()
        )
        return outbox

    async def _read(self, outbox: asyncio.Queue[events_pb2.AppendCall | None]) -> None:
        call = self._stub.AppendStream(_drain(outbox))
        failure = AppendStreamBroken("UNAVAILABLE: the events service ended the call")
        try:
            async for answer in call:
                waiting = self._waiting.get(answer.id)
                if waiting is not None and not waiting.done():
                    waiting.set_result(answer)
        except grpc.aio.AioRpcError as exc:
            failure = AppendStreamBroken(f"{exc.code().name}: {exc.details()}")
        except asyncio.CancelledError:
            if not dropped_by_grpc():
                raise
            failure = AppendStreamBroken("CANCELLED: the events service is out of reach")
        finally:
            call.cancel()
            if self._outbox is outbox:
                self._outbox = None
            for waiting in self._waiting.values():
                if not waiting.done():
                    waiting.set_exception(failure)


async def _drain(
    outbox: asyncio.Queue[events_pb2.AppendCall | None],
) -> AsyncIterator[events_pb2.AppendCall]:
    while (call := await outbox.get()) is not None:
        yield call
