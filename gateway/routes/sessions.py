"""Session routes: list, read (turns), every workflow's events in order, delete."""

from __future__ import annotations

import re
from typing import Annotated, Any

import grpc
from fastapi import APIRouter, Query, Response

from gateway.conversations import delete_session, session_or_404, settled_turns
from gateway.edge.tenancy import CallerDep
from gateway.errors import ApiError
from gateway.routes.common import ERRORS, Clients, Sessions, parse_types
from gateway.stores.sessions import Session, Turn
from shuttle.envelope import to_json_dict

router = APIRouter(prefix="/api/v1", tags=["sessions"])

PAGE = 1000
"""The most events one page of a session's listing holds."""


def _session_json(session: Session) -> dict[str, Any]:
    return {
        "session_id": session.session_id,
        "title": session.title,
        "created_at": session.created_at.isoformat(),
        "updated_at": session.updated_at.isoformat(),
    }


def _turn_json(turn: Turn) -> dict[str, Any]:
    return {
        "workflow_id": turn.workflow_id,
        "user_message": turn.user_message,
        "answer": turn.answer,
        "status": turn.status,
        "usage": {
            "input_tokens": turn.usage.input_tokens,
            "output_tokens": turn.usage.output_tokens,
            "total_tokens": turn.usage.total_tokens,
        },
        "cost_usd": turn.usage.cost_usd,
        "created_at": turn.created_at.isoformat(),
    }


@router.get("/sessions", responses=ERRORS)
async def list_sessions(
    caller: CallerDep,
    store: Sessions,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
    offset: Annotated[int, Query(ge=0, le=1_000_000)] = 0,
) -> dict[str, Any]:
    """The caller's sessions, most recently active first; `next_offset` pages on."""
    page = await store.page(caller.tenant_id, offset, limit)
    return {
        "sessions": [_session_json(s) for s in page.sessions],
        "next_offset": page.next_offset,
    }


@router.get("/sessions/{session_id}", responses=ERRORS)
async def get_session(
    session_id: str, caller: CallerDep, clients: Clients, store: Sessions
) -> dict[str, Any]:
    """The session and its turns, oldest first."""
    session = await session_or_404(store, caller.tenant_id, session_id)
    turns = await settled_turns(store, clients, caller.tenant_id, session_id)
    return {**_session_json(session), "turns": [_turn_json(t) for t in turns]}


@router.get("/sessions/{session_id}/events", responses=ERRORS)
async def session_events(
    session_id: str,
    caller: CallerDep,
    clients: Clients,
    store: Sessions,
    from_: Annotated[
        str | None,
        Query(
            alias="from",
            max_length=300,
            description="where the page starts: the `next` of the previous page "
            "(`<workflow_id>:<seq>`); absent, the session's first event",
        ),
    ] = None,
    limit: Annotated[int, Query(ge=1, le=PAGE)] = 100,
    types: str | None = None,
) -> dict[str, Any]:
    """One page of the session's events: its workflows turn by turn, each log in seq order.

    `next` is the cursor of the following page, `<workflow_id>:<seq>` (the workflow and the
    seq to go on from), or null after the last event; pages joined in order are the whole
    listing, without gap or repeat."""
    tenant = caller.tenant_id
    await session_or_404(store, tenant, session_id)
    wanted = parse_types(types)
    workflows = [t.workflow_id for t in await store.turns(tenant, session_id) if t.workflow_id]
    index, from_seq = _cursor(from_, workflows)
    events: list[dict[str, Any]] = []
    while index < len(workflows):
        workflow_id = workflows[index]
        try:
            page = await clients.events.list_events(
                workflow_id, tenant, from_seq=from_seq, limit=limit - len(events), types=wanted
            )
        except grpc.aio.AioRpcError as exc:
            if exc.code() != grpc.StatusCode.NOT_FOUND:
                raise
            page = None  # the log is gone (retention): the turn has no events left
        if page is not None:
            events += [to_json_dict(e) for e in page.events]
            if page.next_seq:  # the log holds more than this page had room for
                return _page(session_id, events, f"{workflow_id}:{page.next_seq}")
        index, from_seq = index + 1, 1
        if len(events) >= limit:
            break
    following = f"{workflows[index]}:1" if index < len(workflows) else None
    return _page(session_id, events, following)


def _page(session_id: str, events: list[dict[str, Any]], following: str | None) -> dict[str, Any]:
    return {"session_id": session_id, "events": events, "next": following}


def _cursor(raw: str | None, workflows: list[str]) -> tuple[int, int]:
    """The index among the session's workflows and the seq a `from` cursor names."""
    if raw is None or raw == "":
        return 0, 1
    workflow_id, colon, seq = raw.rpartition(":")
    if colon and workflow_id in workflows and re.fullmatch(r"[0-9]{1,19}", seq, re.ASCII):
        number = int(seq)
        if 1 <= number < 2**63:
            return workflows.index(workflow_id), number
    raise ApiError(
        400,
        "invalid_argument",
        f"from must be the `next` of an earlier page, <workflow_id>:<seq> naming a workflow "
        f"of this session; got {raw[:80]!r}",
    )


@router.delete(
    "/sessions/{session_id}",
    status_code=204,
    responses={**ERRORS, 409: {"description": "a task of the session is still running"}},
)
async def remove_session(
    session_id: str, caller: CallerDep, clients: Clients, store: Sessions
) -> Response:
    """Delete the session: its turns, its workflows' events, tool workspaces and records."""
    await delete_session(store, clients, caller.tenant_id, session_id)
    return Response(status_code=204)
