"""AG-UI: `POST /ag-ui` runs a task from a RunAgentInput and answers its log as AG-UI events
over SSE; `GET /ag-ui/runs/{runId}` rejoins a run from `Last-Event-ID`.

`threadId` is the session, `runId` names the run (it is the submission's idempotency key,
so posting the same input again follows the same run), the last user message is the task
and the earlier messages open a new thread's history. Every frame's `id` is the seq of the
log event it comes from: `N` on the last frame of event N, `N.k` on its earlier frames (k
from 0), so a client cut off anywhere resumes exactly after the last frame it read. AG-UI
carries no seq of its own; a rejoin sends a MESSAGES_SNAPSHOT of the run so far and opens
again whatever was open, then the events after that point.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Sequence
from typing import Annotated, Any

from ag_ui.core import (
    BaseEvent,
    MessagesSnapshotEvent,
    RunAgentInput,
    RunErrorEvent,
    RunStartedEvent,
    TextInputContent,
)
from fastapi import APIRouter, Header, Request
from pydantic import ValidationError
from sse_starlette import EventSourceResponse, ServerSentEvent

from gateway.ag_ui.translate import AgUiTranslator, RunIds
from gateway.ag_ui.view import ClientView
from gateway.backends import Backends
from gateway.edge.tenancy import CallerDep
from gateway.errors import ApiError
from gateway.routes.common import ERRORS, Clients, Fanout, Index, Sessions, workflow_of
from gateway.routes.stream import PING_SECONDS, RETRY_MS, SSE_HEADERS
from gateway.submit import TaskSpec, submit
from shuttle.envelope import to_json_dict
from shuttle.events_client.follow import UpstreamError
from shuttle.metrics import SSE_CONNECTIONS
from shuttle.v1 import common_pb2

router = APIRouter(tags=["ag-ui"])

KEY_PREFIX = "ag-ui:"
MAX_ID_CHARS = 128
# AG-UI's own clients split frames on blank lines written as LF only.
SEP = "\n"
RETRY_LINE = f"retry: {RETRY_MS}{SEP}".encode()
_FRAME_ID = re.compile(r"([0-9]{1,19})(?:\.([0-9]{1,4}))?", re.ASCII)


def _refuse(message: str) -> ApiError:
    return ApiError(400, "invalid_request", message)


def _text(content: Any) -> str:
    """A message's text: a string, or the text parts of a list of parts."""
    if isinstance(content, str):
        return content
    parts = content or []
    return "\n".join(part.text for part in parts if isinstance(part, TextInputContent))


def run_input(body: dict[str, Any]) -> RunAgentInput:
    try:
        return RunAgentInput.model_validate(body)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in error['loc'])}: {error['msg']}"
            for error in exc.errors()[:5]
        )
        raise _refuse(f"not an AG-UI RunAgentInput: {problems}") from None


def task_spec(given: RunAgentInput, thread_known: bool) -> TaskSpec:
    """The task a RunAgentInput asks for; refusals name what to change."""
    for name, value in (("threadId", given.thread_id), ("runId", given.run_id)):
        if not value.strip() or len(value) > MAX_ID_CHARS:
            raise _refuse(f"{name} must be 1 to {MAX_ID_CHARS} characters")
    if given.tools:
        raise _refuse(
            "tools: Shuttle runs its own tools (its tools service, with hooks and "
            "approvals); send no client-side tools"
        )
    said = [(m.role, _text(getattr(m, "content", ""))) for m in given.messages]
    said = [(role, text) for role, text in said if role in ("user", "assistant") and text]
    if not said or said[-1][0] != "user":
        raise _refuse("messages: the last message must be the user's, with text: the task")
    context = {item.description: item.value for item in given.context or []}
    return TaskSpec(
        query=said[-1][1],
        session_id=given.thread_id,
        context=context,
        # A thread Shuttle already holds brings its own history; a new one takes the client's.
        earlier=() if thread_known else tuple(said[:-1]),
    )


def frame_point(header: str | None) -> tuple[int, int | None]:
    """(seq, k) of a frame id: after all of event `seq` (k None) or after its frame k."""
    match = _FRAME_ID.fullmatch((header or "").strip())
    if match is None:
        raise _refuse(
            f"Last-Event-ID must be the id of an AG-UI frame of this run (such as 42 or "
            f"42.1), got {header!r}"
        )
    frame = match.group(2)
    return int(match.group(1)), None if frame is None else int(frame)


class _Frames:
    """A stream's AG-UI frames of log events, with their ids."""

    def __init__(self, ids: RunIds) -> None:
        self.translator = AgUiTranslator(ids)

    def of(self, event: common_pb2.Event) -> list[bytes]:
        return _framed(event.seq, self.translator.translate(to_json_dict(event)))


def _framed(seq: int, made: Sequence[BaseEvent], start: int = 0) -> list[bytes]:
    """Frames `start`… of the AG-UI events one log event made, with their ids."""
    last = len(made) - 1
    return [
        _frame(item, str(seq) if i == last else f"{seq}.{i}")
        for i, item in enumerate(made)
        if i >= start
    ]


def _frame(event: BaseEvent, frame_id: str) -> bytes:
    data = event.model_dump_json(by_alias=True, exclude_none=True)
    return ServerSentEvent(data=data, id=frame_id, sep=SEP).encode()


async def _stream(first: Sequence[bytes], live: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    SSE_CONNECTIONS.labels("ag-ui").inc()
    try:
        yield RETRY_LINE + b"".join(first)
        async for data in live:
            yield data
    finally:
        SSE_CONNECTIONS.labels("ag-ui").dec()


async def _live(
    fanout: Fanout, tenant: str, workflow_id: str, from_seq: int, frames: _Frames
) -> AsyncIterator[bytes]:
    chunks = fanout.watch(tenant, workflow_id, from_seq)
    try:
        async for chunk in chunks:
            data = b"".join(f for item in chunk.items for f in frames.of(item.event))
            if data:
                yield data
    except UpstreamError as exc:
        failed = RunErrorEvent(message=exc.message, code=exc.code)
        yield ServerSentEvent(data=failed.model_dump_json(by_alias=True), sep=SEP).encode()
    finally:
        await chunks.aclose()


@router.post("/ag-ui", responses=ERRORS)
async def run_agent(
    request: Request,
    caller: CallerDep,
    clients: Clients,
    index: Index,
    sessions: Sessions,
    fanout: Fanout,
) -> EventSourceResponse:
    """Run a task from an AG-UI RunAgentInput; the answer is its AG-UI event stream."""
    try:
        body = await request.json()
    except ValueError:
        raise _refuse("the body must be a JSON RunAgentInput") from None
    given = run_input(body if isinstance(body, dict) else {})
    known = await sessions.get(caller.tenant_id, given.thread_id) is not None
    spec = task_spec(given, known)
    asking = next(m.id for m in reversed(given.messages) if m.role == "user")
    done = await submit(
        clients,
        index,
        sessions,
        caller.tenant_id,
        caller.key_id,
        spec,
        KEY_PREFIX + given.run_id,
        asking[:MAX_ID_CHARS],
    )
    frames = _Frames(RunIds(given.thread_id, given.run_id))
    live = _live(fanout, caller.tenant_id, done.workflow_id, 1, frames)
    return EventSourceResponse(_stream((), live), ping=PING_SECONDS, headers=SSE_HEADERS, sep=SEP)


LastEventId = Annotated[str | None, Header(alias="Last-Event-ID")]


@router.get("/ag-ui/runs/{run_id}", responses=ERRORS)
async def rejoin_run(
    run_id: str,
    caller: CallerDep,
    clients: Clients,
    index: Index,
    fanout: Fanout,
    last_event_id: LastEventId = None,
) -> EventSourceResponse:
    """Rejoin a run: a MESSAGES_SNAPSHOT of it so far, what was open opened again, then the
    events after `Last-Event-ID` (none: from the start), live."""
    tenant = caller.tenant_id
    keyed = await index.keyed(tenant, KEY_PREFIX + run_id)
    # A run started elsewhere (the task API, say) is rejoined by its workflow id.
    workflow_id = keyed.workflow_id if keyed else run_id
    asking = (keyed.client_message_id if keyed else None) or f"{run_id}:user"
    record = await workflow_of(clients, tenant, workflow_id)
    seq, frame = frame_point(last_event_id) if last_event_id else (0, None)
    if seq > record.last_seq:
        raise _refuse(f"Last-Event-ID {seq} is beyond this run's log (last seq {record.last_seq})")
    frames = _Frames(RunIds(record.session_id, run_id))
    view, unread = await _replay(clients, tenant, workflow_id, (seq, frame), asking, frames)
    point = str(seq) if frame is None else f"{seq}.{frame}"
    opening = [
        RunStartedEvent(thread_id=record.session_id, run_id=run_id),
        MessagesSnapshotEvent(messages=view.messages),
        frames.translator.snapshot(),
        *view.reopen(),
    ]
    first = [_frame(event, point) for event in opening] + unread
    live = _live(fanout, tenant, workflow_id, seq + 1, frames)
    return EventSourceResponse(
        _stream(first, live), ping=PING_SECONDS, headers=SSE_HEADERS, sep=SEP
    )


async def _replay(
    clients: Backends,
    tenant: str,
    workflow_id: str,
    point: tuple[int, int | None],
    asking: str,
    frames: _Frames,
) -> tuple[ClientView, list[bytes]]:
    """The client's view after event `seq` (after frame `frame` of it), rebuilt from the
    log, and the frames of event `seq` it had not read; `asking` names the user's message."""
    seq, frame = point
    view = ClientView()
    unread: list[bytes] = []
    from_seq = 1
    while 0 < from_seq <= seq:
        page = await clients.events.list_events(
            workflow_id, tenant, from_seq=from_seq, full_results=True
        )
        for event in page.events:
            if event.seq > seq:
                break
            envelope = to_json_dict(event)
            if envelope["type"] == "WORKFLOW_STARTED":
                query = str(envelope["payload"].get("query", ""))
                view.add_user(asking, query)
            made = frames.translator.translate(envelope)
            read = len(made) if event.seq < seq or frame is None else frame + 1
            for item in made[:read]:
                view.apply(item)
            unread = _framed(event.seq, made, read)
        from_seq = page.next_seq
    return view, unread
