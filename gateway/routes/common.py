"""Request dependencies shared by the route modules, and small request/reply conversions."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from gateway.backends import Backends
from gateway.errors import ApiError
from gateway.fanout import FanOut
from gateway.stores.sessions import SessionStore
from gateway.stores.task_index import TaskIndex
from shuttle.envelope import type_value
from shuttle.v1 import common_pb2


def backends_of(request: Request) -> Backends:
    backends: Backends = request.app.state.backends
    return backends


def fanout_of(request: Request) -> FanOut:
    fanout: FanOut = request.app.state.fanout
    return fanout


def task_index_of(request: Request) -> TaskIndex:
    index: TaskIndex = request.app.state.task_index
    return index


def sessions_of(request: Request) -> SessionStore:
    store: SessionStore = request.app.state.sessions
    return store


Clients = Annotated[Backends, Depends(backends_of)]
Fanout = Annotated[FanOut, Depends(fanout_of)]
Index = Annotated[TaskIndex, Depends(task_index_of)]
Sessions = Annotated[SessionStore, Depends(sessions_of)]


def status_name(value: int) -> str:
    return common_pb2.WorkflowStatus.Name(value).removeprefix("WORKFLOW_STATUS_").lower()  # type: ignore[arg-type]


def parse_types(raw: str | None) -> list[common_pb2.EventType.ValueType]:
    if not raw:
        return []
    try:
        return [type_value(name) for name in raw.split(",") if name.strip()]
    except ValueError as exc:
        raise ApiError(400, "invalid_argument", str(exc)) from None
