"""Session routes: list, read (turns), every workflow's events in order, delete."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Response

from gateway.conversations import delete_session, session_or_404, settled_turns
from gateway.edge.tenancy import CallerDep
from gateway.routes.common import ERRORS, Clients, Sessions, parse_types
from gateway.stores.sessions import Session, Turn
from shuttle.envelope import to_json_dict

router = APIRouter(prefix="/api/v1", tags=["sessions"])

PAGE = 1000


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
    types: str | None = None,
) -> dict[str, Any]:
    """Every event of every workflow of the session: turn by turn, each log in seq order."""
    tenant = caller.tenant_id
    await session_or_404(store, tenant, session_id)
    wanted = parse_types(types)
    events: list[dict[str, Any]] = []
    for turn in await store.turns(tenant, session_id):
        if not turn.workflow_id:
            continue
        from_seq = 1
        while from_seq:
            page = await clients.events.list_events(
                turn.workflow_id, tenant, from_seq=from_seq, limit=PAGE, types=wanted
            )
            events += [to_json_dict(e) for e in page.events]
            from_seq = page.next_seq
    return {"session_id": session_id, "events": events}


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
