"""EventService.FollowCommands: the command events of many workflows over one stream.

A session sends watches and unwatches as they come and receives, per watched workflow, its
control events and user messages from the watch's seq on, then the end of its log.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import grpc

from shuttle.envelope import type_name
from shuttle.grpc_client import RETRYABLE_CODES, dropped_by_grpc, status_code
from shuttle.v1 import common_pb2, events_pb2, events_pb2_grpc
from shuttle.workflow_log import FeedItem, LogCommand, LogUnavailable, Watch, WatchRequest

_OUT_OF_REACH = "CANCELLED: the events service is out of reach"


def log_command(event: common_pb2.Event) -> LogCommand:
    payload = json.loads(event.payload_json) if event.payload_json else {}
    return LogCommand(
        int(event.seq), type_name(event.type), payload if isinstance(payload, dict) else {}
    )


async def follow_commands(
    stub: events_pb2_grpc.EventServiceAsyncStub, requests: AsyncIterator[WatchRequest]
) -> AsyncIterator[FeedItem]:
    """One session, until `requests` ends and every watch is over; raises LogUnavailable
    when the events service is out of reach (the session may be opened again)."""
    call = stub.FollowCommands(_watch_messages(requests))
    try:
        async for message in call:
            yield _feed_item(message)
    except grpc.aio.AioRpcError as exc:
        if exc.code() in RETRYABLE_CODES:
            raise LogUnavailable(f"{exc.code().name}: {exc.details()}") from exc
        raise
    except asyncio.CancelledError:
        if not dropped_by_grpc():
            raise
        raise LogUnavailable(_OUT_OF_REACH) from None
    finally:
        call.cancel()


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
        tuple(log_command(e) for e in message.events),
        ended=message.ended,
        error=error,
        retryable=retryable,
    )
