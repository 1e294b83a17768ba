"""Starting a task for a caller: one path for the task API and the OpenAI-compatible face."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, TypeGuard

import grpc

from gateway.backends import Backends, tenant_metadata
from gateway.conversations import settled_turns
from gateway.errors import ApiError
from gateway.stores.sessions import NewTurn, SessionStore, history_of, new_session_id
from gateway.stores.task_index import KeyInFlightError, KeyReuseError, TaskIndex, request_hash
from shuttle.utf8 import json_text
from shuttle.v1 import common_pb2, executor_pb2

MODES = {
    "simple": common_pb2.MODE_SIMPLE,
    "standard": common_pb2.MODE_STANDARD,
    "complex": common_pb2.MODE_COMPLEX,
}


RUN_LIMIT_RETRY_SECONDS = 10
# How long a task waits for an executor to be reachable and to start its run.
START_RUN_TIMEOUT_SECONDS = 15.0
"""Retry-After of a start refused for the tenant's concurrent runs: about how soon one of
them may have ended."""


def run_limit_reached(exc: BaseException) -> TypeGuard[grpc.aio.AioRpcError]:
    """Whether StartRun was refused because the tenant has SHUTTLE_TENANT_MAX_RUNS runs going
    (the events service's CreateWorkflow names the setting). gRPC's own RESOURCE_EXHAUSTED,
    for a message over its size limit, is no reason to retry and is not this."""
    return (
        isinstance(exc, grpc.aio.AioRpcError)
        and exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        and "SHUTTLE_TENANT_MAX_RUNS" in (exc.details() or "")
    )


@dataclass(frozen=True)
class TaskSpec:
    query: str
    session_id: str = ""
    mode: str = ""
    model: str = ""
    budget_tokens: int = 0
    context: dict[str, Any] = field(default_factory=dict)
    earlier: tuple[tuple[str, str], ...] = ()
    """Earlier (role, content) messages the caller sent along (OpenAI style, AG-UI): they
    become the first turns of the session (`session_id`, or a new one)."""

    def as_dict(self) -> dict[str, Any]:
        return {
            "query": self.query,
            "session_id": self.session_id,
            "mode": self.mode,
            "model": self.model,
            "budget_tokens": self.budget_tokens,
            "context": self.context,
            "earlier": [list(pair) for pair in self.earlier],
        }


@dataclass(frozen=True)
class Submitted:
    workflow_id: str
    status: int
    replayed: bool
    """True when an earlier request with the same Idempotency-Key started this workflow."""
    session_id: str = ""


async def submit(
    backends: Backends,
    index: TaskIndex,
    sessions: SessionStore,
    tenant_id: str,
    owner: str,
    spec: TaskSpec,
    idempotency_key: str | None = None,
    client_message_id: str | None = None,
) -> Submitted:
    try:
        reservation = await index.reserve(
            tenant_id,
            idempotency_key,
            request_hash(spec.as_dict()),
            spec.query,
            client_message_id,
        )
    except KeyReuseError:
        raise ApiError(
            422,
            "idempotency_key_reused",
            "this Idempotency-Key was already used with a different request body",
        ) from None
    except KeyInFlightError:
        raise ApiError(
            409,
            "idempotency_key_in_flight",
            "a request with this Idempotency-Key is still starting its task; retry shortly "
            "(a reservation without a task is given up after "
            f"SHUTTLE_IDEMPOTENCY_RESERVATION_SECONDS={index.stale_after_seconds:g})",
        ) from None
    if reservation.workflow_id is not None:
        session_id = await sessions.session_of(tenant_id, reservation.workflow_id)
        return Submitted(
            reservation.workflow_id, common_pb2.WORKFLOW_STATUS_PENDING, True, session_id
        )
    assert reservation.row_id is not None
    try:
        joined = await _join_session(backends, sessions, tenant_id, spec)
    except BaseException:
        await index.release(reservation)
        raise
    request = executor_pb2.StartRunRequest(
        query=spec.query,
        tenant_id=tenant_id,
        owner=owner,
        session_id=joined.session_id,
        history=[common_pb2.ChatMessage(role=role, content=text) for role, text in joined.history],
        mode=MODES[spec.mode.lower()] if spec.mode else common_pb2.MODE_UNSPECIFIED,
        model=spec.model,
        budget_tokens=spec.budget_tokens,
        # Characters as they are: ASCII escapes would make the message up to six times
        # the size of the request that brought them.
        context_json=json_text(spec.context) if spec.context else "",
    )
    try:
        # Waits for a reachable executor (one restarting, or the only one back after a
        # restart) rather than failing at once: StartRun is not retried, as it acts once.
        started = await backends.executor.StartRun(
            request,
            metadata=tenant_metadata(tenant_id),
            wait_for_ready=True,
            timeout=START_RUN_TIMEOUT_SECONDS,
        )
    except BaseException as exc:
        await index.release(reservation)
        if run_limit_reached(exc):
            raise ApiError(
                429,
                "tenant_run_limit",
                str(exc.details()),
                headers={"Retry-After": str(RUN_LIMIT_RETRY_SECONDS)},
            ) from None
        raise
    turn = NewTurn(
        tenant_id,
        joined.session_id,
        spec.query,
        workflow_id=started.workflow_id,
        new_session=joined.is_new,
    )
    await index.complete(reservation, started.workflow_id, turn)
    return Submitted(started.workflow_id, started.status, False, joined.session_id)


@dataclass(frozen=True)
class _Joined:
    session_id: str
    history: list[tuple[str, str]]
    is_new: bool
    """A session of a new id, created only with its first turn: until then it has none."""


async def _join_session(
    backends: Backends, sessions: SessionStore, tenant_id: str, spec: TaskSpec
) -> _Joined:
    """The run's session (created on first use, or new without an id) and its history."""
    if not (spec.earlier or spec.session_id):
        return _Joined(new_session_id(), [], is_new=True)
    if spec.earlier:
        session_id = await sessions.open(tenant_id, spec.session_id, spec.earlier[0][1])
        for user, answer in _pairs(spec.earlier):
            await sessions.add_turn(tenant_id, session_id, user, answer=answer)
    else:
        session_id = await sessions.open(tenant_id, spec.session_id, spec.query)
    turns = await settled_turns(sessions, backends, tenant_id, session_id)
    return _Joined(session_id, history_of(turns, sessions.history_max_bytes), is_new=False)


def _pairs(messages: tuple[tuple[str, str], ...]) -> list[tuple[str, str]]:
    """Messages as (user, assistant) turns; consecutive messages of one role are joined."""
    turns: list[tuple[str, str]] = []
    user: list[str] = []
    answer: list[str] = []
    for role, text in messages:
        if role == "user" and answer:
            turns.append(("\n\n".join(user), "\n\n".join(answer)))
            user, answer = [], []
        (user if role == "user" else answer).append(text)
    if user or answer:
        turns.append(("\n\n".join(user), "\n\n".join(answer)))
    return turns
