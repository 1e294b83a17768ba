"""The appends of a whole process over one EventService.AppendStream call.

A unary Append costs the events service about twice the CPU of one message on a stream
(gRPC's per-call setup and the interceptors), and every run appends a dozen times or more.
Batches are matched to their answers by id. A batch the events service refuses comes back
with its own error; a broken call fails the batches in flight as unavailable, which their
producers resend under the same batch number (the events service answers a repeat with the
first seqs), and the next batch opens a new call. The process's new workflows go over the
same call, for the same saving; a creation is never resent.
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
        return await self._ask(events_pb2.AppendCall(request=request), timeout_seconds)

    async def create(
        self, request: events_pb2.CreateWorkflowRequest, timeout_seconds: float
    ) -> events_pb2.AppendAnswer:
        """The new workflow, or the error that refused it. Raises AppendStreamBroken: then
        whether the workflow was made is unknown."""
        return await self._ask(events_pb2.AppendCall(create=request), timeout_seconds)

    async def _ask(
        self, call: events_pb2.AppendCall, timeout_seconds: float
    ) -> events_pb2.AppendAnswer:
        outbox = self._outbox if self._outbox is not None else self._open()
        self._next_id += 1
        call_id = call.id = self._next_id
        answer: asyncio.Future[events_pb2.AppendAnswer] = asyncio.get_running_loop().create_future()
        self._waiting[call_id] = answer
        carrier: dict[str, str] = {}
        inject(carrier)  # the run's trace travels with its call, not with the stream
        call.traceparent = carrier.get("traceparent", "")
        outbox.put_nowait(call)
        # Not asyncio.wait_for: its timer keeps the caller's context until the timer is due,
        # cancelled or not, and a run created from a request would keep the request's span
        # alive for as long (tests/executor/test_run_footprint.py).
        timer = asyncio.get_running_loop().call_later(
            timeout_seconds, _expire, answer, context=contextvars.Context()
        )
        try:
            return await answer
        finally:
            timer.cancel()
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


def _expire(answer: asyncio.Future[events_pb2.AppendAnswer]) -> None:
    if not answer.done():
        answer.set_exception(AppendStreamBroken("DEADLINE_EXCEEDED: no answer in time"))


async def _drain(
    outbox: asyncio.Queue[events_pb2.AppendCall | None],
) -> AsyncIterator[events_pb2.AppendCall]:
    while (call := await outbox.get()) is not None:
        yield call
