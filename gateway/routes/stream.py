"""Both SSE dialects of the workflow log, and the tickets EventSource clients open them with.

Typed: `id: seq`, `event: TYPE`, `data: envelope`. ReAct channels (`dialect=react`, or its
alias `dialect=fim`): `step`, `answer`, `compact`, `phase`, `inject`, `done`. Both resume
from `Last-Event-ID` (or `last_event_id`), send a `retry:` hint and a ping comment, and
close after STREAM_END. Closing a stream never touches the run.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Callable
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Header, Query, Request
from pydantic import BaseModel, Field
from sse_starlette import EventSourceResponse, ServerSentEvent

from gateway.backends import Backends
from gateway.conversations import ENDED
from gateway.edge.tenancy import CallerDep, StreamCallerDep, tenant_for_workflow
from gateway.edge.tickets import TicketSigner
from gateway.errors import ApiError
from gateway.fanout import Chunk, FanOut
from gateway.routes.common import (
    ERRORS,
    Clients,
    Fanout,
    parse_types,
    require_workflow,
    workflow_of,
)
from gateway.routes.react_channels import ReactChannelTranslator
from gateway.workflow_status import status_name
from shuttle.envelope import to_json_dict, type_name, type_value
from shuttle.events_client.follow import UpstreamError
from shuttle.metrics import SSE_CONNECTIONS
from shuttle.utf8 import json_text
from shuttle.v1 import common_pb2

router = APIRouter(prefix="/api/v1", tags=["streams"])

PING_SECONDS = 15
RETRY_MS = 3_000
# Sent once, before a connection's first frame.
RETRY_LINE = f"retry: {RETRY_MS}\r\n".encode()
SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}

Frames = Callable[[common_pb2.Event], list[ServerSentEvent]]

Dialect = Literal["react", "fim", "typed"]
DIALECT_ALIASES: dict[str, Dialect] = {"fim": "react"}
"""Other names a client may ask for a dialect by, each with the dialect it names."""


# The ids the gateway hands out: the SSE `id:` (a seq) and the envelope's `stream_id`
# ("<seq>-0"). ASCII digits only: int() would also take "+7", "7_0" and other scripts' digits.
_RESUME_ID = re.compile(r"([0-9]{1,19})(?:-0)?", re.ASCII)
_SHOWN_CHARS = 40


def resume_point(header: str | None, query: str | None) -> int:
    """The seq after the client's last one; the header wins, as EventSource sends it.

    No id (absent, empty or blank) starts from the beginning; anything but an id this
    gateway emitted is a 400.
    """
    raw = header if header not in (None, "") else query
    if raw is None or not raw.strip():
        return 1
    match = _RESUME_ID.fullmatch(raw.strip())
    if match is None or int(match.group(1)) >= 2**63:
        shown = raw if len(raw) <= _SHOWN_CHARS else f"{raw[:_SHOWN_CHARS]}…"
        raise ApiError(
            400,
            "invalid_argument",
            f"Last-Event-ID must be the id of an event (a seq such as 42, or a stream_id "
            f"such as 42-0), got {shown!r}",
        )
    return int(match.group(1)) + 1


def typed_frames(event: common_pb2.Event) -> list[ServerSentEvent]:
    return [
        ServerSentEvent(
            data=json_text(to_json_dict(event)),
            event=type_name(event.type),
            id=str(event.seq),
        )
    ]


def react_channel_frames() -> Frames:
    translator = ReactChannelTranslator()

    def frames(event: common_pb2.Event) -> list[ServerSentEvent]:
        pairs = translator.translate(to_json_dict(event))
        # Only the last frame of an event carries its seq, so a client cut off halfway
        # through an event's frames resumes from that event again.
        return [
            ServerSentEvent(
                data=json_text(payload),
                event=channel,
                id=str(event.seq) if i == len(pairs) - 1 else None,
            )
            for i, (channel, payload) in enumerate(pairs)
        ]

    return frames


def typed_frame(event: common_pb2.Event) -> bytes:
    """The typed frame of `event` as the wire carries it; rendered once per event and
    shared by every watcher of the workflow (see gateway.fanout)."""
    return typed_frames(event)[0].encode()


def react_channel_bytes() -> Callable[[Chunk], bytes]:
    """A connection's ReAct channel frames: the translator keeps state per connection."""
    render = react_channel_frames()

    def frames(chunk: Chunk) -> bytes:
        return b"".join(f.encode() for item in chunk.items for f in render(item.event))

    return frames


async def open_stream(
    clients: Backends,
    fanout: FanOut,
    tenant: str,
    workflow_id: str,
    from_seq: int,
    types: list[str],
    dialect: Dialect = "typed",
) -> EventSourceResponse:
    # Check before answering 200, so a wrong id is a JSON 404 and not an empty stream.
    record = await workflow_of(clients, tenant, workflow_id)
    if from_seq > record.last_seq + 1:
        if status_name(record.status) in ENDED:
            # The client has the whole log and more: the stream is over, as for one that
            # resumes at its last seq.
            return EventSourceResponse(_nothing(), ping=PING_SECONDS, headers=SSE_HEADERS)
        raise ApiError(
            400,
            "invalid_argument",
            f"Last-Event-ID {from_seq - 1} is beyond the log of workflow {workflow_id}, "
            f"whose last seq is {record.last_seq}; resume from {record.last_seq} or earlier",
        )
    wanted = frozenset(type_value(name) for name in types) if types else None
    chunks = fanout.watch(tenant, workflow_id, from_seq, wanted)
    dialect = DIALECT_ALIASES.get(dialect, dialect)
    translate = react_channel_bytes() if dialect == "react" else None

    async def frames() -> AsyncIterator[bytes]:
        # A client that disconnects closes this generator and with it its watch; the run
        # itself is untouched.
        retry = RETRY_LINE
        SSE_CONNECTIONS.labels(dialect).inc()
        try:
            async for chunk in chunks:
                data = chunk.frames if translate is None else translate(chunk)
                if data and retry:
                    data, retry = retry + data, b""
                if data:
                    yield data
        except UpstreamError as exc:
            error = {"error": {"code": exc.code, "message": exc.message}}
            yield ServerSentEvent(data=json.dumps(error), event="error").encode()
        finally:
            SSE_CONNECTIONS.labels(dialect).dec()
            await chunks.aclose()

    return EventSourceResponse(frames(), ping=PING_SECONDS, headers=SSE_HEADERS)


async def _nothing() -> AsyncIterator[bytes]:
    """The body of a stream that is over before it starts: no frames."""
    return
    yield b""


LastEventIdHeader = Annotated[str | None, Header(alias="Last-Event-ID")]


@router.get("/stream/sse", responses=ERRORS)
async def stream_sse(
    workflow_id: Annotated[str, Query(min_length=1)],
    caller: StreamCallerDep,
    clients: Clients,
    fanout: Fanout,
    types: str | None = None,
    last_event_id: str | None = None,
    ticket: str | None = None,
    last_event_id_header: LastEventIdHeader = None,
) -> EventSourceResponse:
    """The log as typed SSE frames (`id: seq`, `event: TYPE`, `data: envelope`)."""
    tenant = tenant_for_workflow(caller, workflow_id)
    from_seq = resume_point(last_event_id_header, last_event_id)
    return await open_stream(clients, fanout, tenant, workflow_id, from_seq, parse_types(types))


@router.get("/tasks/{workflow_id}/stream", responses=ERRORS)
async def stream_task(
    workflow_id: str,
    caller: StreamCallerDep,
    clients: Clients,
    fanout: Fanout,
    dialect: Dialect = "react",
    last_event_id: str | None = None,
    ticket: str | None = None,
    last_event_id_header: LastEventIdHeader = None,
) -> EventSourceResponse:
    """The log as the ReAct channel protocol (`dialect=react` or `fim`) or as typed frames."""
    tenant = tenant_for_workflow(caller, workflow_id)
    from_seq = resume_point(last_event_id_header, last_event_id)
    return await open_stream(clients, fanout, tenant, workflow_id, from_seq, [], dialect)


class TicketRequest(BaseModel):
    workflow_id: str = Field(min_length=1, max_length=200)


class TicketIssued(BaseModel):
    ticket: str
    expires_in: int
    stream_url: str
    fim_stream_url: str


@router.post("/stream/ticket", response_model=TicketIssued, responses=ERRORS)
async def stream_ticket(
    body: TicketRequest, caller: CallerDep, clients: Clients, request: Request
) -> dict[str, Any]:
    """A short-lived ticket that opens this workflow's streams without headers (EventSource)."""
    await require_workflow(clients, caller.tenant_id, body.workflow_id)
    signer: TicketSigner = request.app.state.tickets
    token, _ = signer.issue(caller.tenant_id, body.workflow_id, caller.key_id)
    wf = body.workflow_id
    return {
        "ticket": token,
        "expires_in": signer.ttl_seconds,
        "stream_url": f"/api/v1/stream/sse?workflow_id={wf}&ticket={token}",
        "fim_stream_url": f"/api/v1/tasks/{wf}/stream?dialect=fim&ticket={token}",
    }
