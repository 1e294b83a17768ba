"""The workflow log over gRPC as the command paths need it: follow, read control state, append."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Mapping, Sequence
from contextlib import aclosing, suppress
from typing import Any

import grpc

from services.executor.command_streams import StreamSession, command
from services.executor.follower import (
    CommandSourceUnavailable,
    FeedItem,
    LogCommand,
    Watch,
    WatchRequest,
)
from services.executor.grpc_clients import RETRYABLE_CODES
from shuttle.envelope import type_value
from shuttle.grpc_client import (
    NoAnswer,
    dropped_by_grpc,
    implements,
    status_code,
    tenant_metadata,
)
from shuttle.utf8 import json_text
from shuttle.v1 import common_pb2, events_pb2, events_pb2_grpc

_CONTROL_TYPES = ("WORKFLOW_PAUSING", "WORKFLOW_PAUSED", "WORKFLOW_RESUMED", "WORKFLOW_CANCELLING")
_PAGE = 1000

log = logging.getLogger(__name__)


_OUT_OF_REACH = "CANCELLED: the events service is out of reach"


class GrpcCommandSource:
    """Sessions of EventService.FollowCommands: many workflows' commands over one stream.

    An events service without FollowCommands (an older release) answers UNIMPLEMENTED; its
    sessions take one Stream per watch instead (`command_streams.py`). The service is asked
    with a call that watches nothing, since a call sending watches to a service refusing it
    may fail with INTERNAL instead. The answer is kept until something fails: the first
    session after a failed one, and the first watch after a failed stream, ask again, so an
    upgraded events service is used once it is back.
    """

    def __init__(self, stub: events_pb2_grpc.EventServiceAsyncStub) -> None:
        self._stub = stub
        self._has_follow: bool | None = None
        self._stale = False
        """Something failed since the answer: the events service may have been replaced."""

    async def follow(self, requests: AsyncIterator[WatchRequest]) -> AsyncIterator[FeedItem]:
        if self._has_follow is None or self._stale:
            await self._ask()
        try:
            if self._has_follow:
                async with aclosing(self._follow_commands(requests)) as items:
                    async for item in items:
                        yield item
                return
            session = StreamSession(self._stub, self._asking(requests))
            async with aclosing(session.items()) as items:
                async for item in items:
                    self._stale = self._stale or item.retryable
                    yield item
        except Exception:
            self._stale = True
            raise

    async def _follow_commands(
        self, requests: AsyncIterator[WatchRequest]
    ) -> AsyncGenerator[FeedItem, None]:
        call = self._stub.FollowCommands(_watch_messages(requests))
        try:
            async for message in call:
                yield _feed_item(message)
        except grpc.aio.AioRpcError as exc:
            if exc.code() in RETRYABLE_CODES or exc.code() == grpc.StatusCode.UNIMPLEMENTED:
                raise CommandSourceUnavailable(f"{exc.code().name}: {exc.details()}") from exc
            raise
        except asyncio.CancelledError:
            if not dropped_by_grpc():
                raise
            raise CommandSourceUnavailable(_OUT_OF_REACH) from None
        finally:
            call.cancel()

    async def _asking(self, requests: AsyncIterator[WatchRequest]) -> AsyncIterator[WatchRequest]:
        """`requests`, asking again before a watch while the answer is stale; an events
        service that implements FollowCommands now ends the session, to be opened on it."""
        async for request in requests:
            if isinstance(request, Watch) and self._stale:
                with suppress(CommandSourceUnavailable):  # out of reach: its stream says so
                    await self._ask()
                if self._has_follow:
                    raise CommandSourceUnavailable("the events service implements FollowCommands")
            yield request

    async def _ask(self) -> None:
        """Learn whether the events service implements FollowCommands; raises
        CommandSourceUnavailable when it gives no answer."""
        try:
            has_follow = await implements(self._stub.FollowCommands)
        except NoAnswer as exc:
            raise CommandSourceUnavailable(str(exc)) from exc
        self._learn(has_follow=has_follow)

    def _learn(self, *, has_follow: bool) -> None:
        if not has_follow and self._has_follow is not False:
            log.warning(
                "the events service does not implement FollowCommands (an older release): "
                "following the commands of each run over a stream of its own"
            )
        elif has_follow and self._has_follow is False:
            log.info("the events service implements FollowCommands: one stream for all runs")
        self._has_follow = has_follow
        self._stale = False


async def _watch_messages(
    requests: AsyncIterator[WatchRequest],
) -> AsyncIterator[events_pb2.CommandWatch]:
    async for request in requests:
        if isinstance(request, Watch):
            yield events_pb2.CommandWatch(
                watch=events_pb2.WatchCommands(
                    workflow_id=request.workflow_id,
                    tenant_id=request.tenant_id,
                    from_seq=request.from_seq,
                )
            )
        else:
            yield events_pb2.CommandWatch(
                unwatch=events_pb2.UnwatchCommands(workflow_id=request.workflow_id)
            )


def _feed_item(message: events_pb2.CommandFeed) -> FeedItem:
    error = ""
    retryable = False
    if message.HasField("error"):
        code = status_code(message.error.code)
        error = f"{code.name}: {message.error.message}"
        retryable = code in RETRYABLE_CODES
    return FeedItem(
        message.workflow_id,
        tuple(command(e) for e in message.events),
        ended=message.ended,
        error=error,
        retryable=retryable,
    )


class GrpcWorkflowLog:
    """What Control and Interrupt read and write, through the EventService."""

    def __init__(self, stub: events_pb2_grpc.EventServiceAsyncStub) -> None:
        self._stub = stub

    async def status(self, workflow_id: str, tenant_id: str) -> str:
        workflow = await self._stub.GetWorkflow(
            events_pb2.GetWorkflowRequest(workflow_id=workflow_id, tenant_id=tenant_id),
            metadata=tenant_metadata(tenant_id),
        )
        return common_pb2.WorkflowStatus.Name(workflow.status).removeprefix("WORKFLOW_STATUS_")

    async def control_events(self, workflow_id: str, tenant_id: str) -> Sequence[LogCommand]:
        found: list[LogCommand] = []
        from_seq = 1
        while from_seq:
            page = await self._stub.List(
                events_pb2.ListRequest(
                    workflow_id=workflow_id,
                    tenant_id=tenant_id,
                    from_seq=from_seq,
                    limit=_PAGE,
                    types=[type_value(t) for t in _CONTROL_TYPES],
                ),
                metadata=tenant_metadata(tenant_id),
            )
            found += [command(e) for e in page.events]
            from_seq = int(page.next_seq)
        return found

    async def append(
        self, workflow_id: str, tenant_id: str, type_: str, message: str, payload: Mapping[str, Any]
    ) -> int:
        request = events_pb2.AppendRequest(
            workflow_id=workflow_id,
            tenant_id=tenant_id,
            events=[
                common_pb2.EventDraft(
                    type=type_value(type_),
                    message=message,
                    payload_json=json_text(dict(payload)),
                )
            ],
            # A command is its own producer: a retried RPC must not append it twice.
            producer_id=f"command:{uuid.uuid4().hex}",
            batch_seq=1,
        )
        response = await self._stub.Append(request, metadata=tenant_metadata(tenant_id))
        return int(response.seqs[0])
