"""The runs of this process append over one EventService.AppendStream call.

A unary Append costs the events service about twice the CPU of one message on a stream
(gRPC's per-call setup and the interceptors), and every run appends a dozen times or more.
Batches are matched to their answers by id. A batch the events service refuses comes back
with its own error; a broken call fails the batches in flight as unavailable, which the
emitter resends under the same batch number (the events service answers a repeat with the
first seqs), and the next batch opens a new call.

Whether the events service has the RPC is asked with a call that sends nothing: a call that
sends batches to a service without it may fail with INTERNAL rather than UNIMPLEMENTED (a race
in gRPC between the client's writes and the server's refusal). It is asked before the first
call and again after a broken one or a failed unary Append (the service may have been
replaced by another release); without it, the sinks append call by call.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections.abc import AsyncIterator

import grpc
from opentelemetry.propagate import inject

from shuttle.grpc_client import NoAnswer, dropped_by_grpc, implements
from shuttle.v1 import events_pb2, events_pb2_grpc

log = logging.getLogger(__name__)


class AppendStreamBroken(Exception):
    """The call ended before the batch was answered, or the answer did not come in time:
    whether the batch was stored is unknown, so it is resent."""


class AppendStreamUnsupported(Exception):
    """The events service has no AppendStream (an older release): use Append."""


class AppendStream:
    """One AppendStream call shared by every sink of the process, opened on first use."""

    def __init__(self, stub: events_pb2_grpc.EventServiceAsyncStub) -> None:
        self._stub = stub
        self.supported = True
        """What the events service last answered (True until asked)."""
        self._asked = False
        self._asking: asyncio.Task[None] | None = None
        self._outbox: asyncio.Queue[events_pb2.AppendCall | None] | None = None
        self._reader: asyncio.Task[None] | None = None
        self._waiting: dict[int, asyncio.Future[events_pb2.AppendAnswer]] = {}
        self._next_id = 0

    async def append(
        self, request: events_pb2.AppendRequest, timeout_seconds: float
    ) -> events_pb2.AppendAnswer:
        """The batch's answer: its seqs, or the error that refused it. Raises
        AppendStreamBroken (resend) or AppendStreamUnsupported (use Append)."""
        if not self._asked:
            await self._ask()
        if not self.supported:
            raise AppendStreamUnsupported()
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

    def reconsider(self) -> None:
        """The events service may have changed (an Append to it failed): ask again."""
        self._asked = False

    async def close(self) -> None:
        reader, self._reader = self._reader, None
        self._outbox = None
        if reader is not None:
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)

    async def _ask(self) -> None:
        # One question for every sink that needs the answer meanwhile.
        if self._asking is None:
            self._asking = asyncio.create_task(self._question(), context=contextvars.Context())
            self._asking.add_done_callback(_retrieve)  # its askers may all have left
        asking = self._asking
        try:
            await asyncio.shield(asking)
        finally:
            if asking.done() and self._asking is asking:
                self._asking = None

    async def _question(self) -> None:
        try:
            supported = await implements(self._stub.AppendStream)
        except NoAnswer as exc:
            raise AppendStreamBroken(str(exc)) from exc
        self._learn(supported=supported)

    def _learn(self, *, supported: bool) -> None:
        if self.supported and not supported:
            log.warning("the events service has no AppendStream; appending call by call")
        elif supported and not self.supported:
            log.info("the events service has AppendStream again: one call for all runs")
        self.supported = supported
        self._asked = True

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
            self._asked = False  # whatever broke the call may have replaced the service
            for waiting in self._waiting.values():
                if not waiting.done():
                    waiting.set_exception(failure)


def _retrieve(task: asyncio.Task[None]) -> None:
    if not task.cancelled():
        task.exception()


async def _drain(
    outbox: asyncio.Queue[events_pb2.AppendCall | None],
) -> AsyncIterator[events_pb2.AppendCall]:
    while (call := await outbox.get()) is not None:
        yield call
