"""Starting a task for a caller: one path for the task API and the OpenAI-compatible face."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from gateway.backends import Backends, tenant_metadata
from gateway.errors import ApiError
from gateway.task_index import KeyInFlightError, KeyReuseError, TaskIndex, request_hash
from shuttle.v1 import common_pb2, executor_pb2

MODES = {
    "simple": common_pb2.MODE_SIMPLE,
    "standard": common_pb2.MODE_STANDARD,
    "complex": common_pb2.MODE_COMPLEX,
}


@dataclass(frozen=True)
class TaskSpec:
    query: str
    session_id: str = ""
    mode: str = ""
    model: str = ""
    budget_tokens: int = 0
    context: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "query": self.query,
            "session_id": self.session_id,
            "mode": self.mode,
            "model": self.model,
            "budget_tokens": self.budget_tokens,
            "context": self.context,
        }


@dataclass(frozen=True)
class Submitted:
    workflow_id: str
    status: int
    replayed: bool
    """True when an earlier request with the same Idempotency-Key started this workflow."""


async def submit(
    backends: Backends,
    index: TaskIndex,
    tenant_id: str,
    owner: str,
    spec: TaskSpec,
    idempotency_key: str | None = None,
) -> Submitted:
    try:
        reservation = await index.reserve(
            tenant_id, idempotency_key, request_hash(spec.as_dict()), spec.query
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
            "a request with this Idempotency-Key is still starting its task; retry shortly",
        ) from None
    if reservation.workflow_id is not None:
        return Submitted(reservation.workflow_id, common_pb2.WORKFLOW_STATUS_PENDING, True)
    assert reservation.row_id is not None
    request = executor_pb2.StartRunRequest(
        query=spec.query,
        tenant_id=tenant_id,
        owner=owner,
        session_id=spec.session_id,
        mode=MODES[spec.mode.lower()] if spec.mode else common_pb2.MODE_UNSPECIFIED,
        model=spec.model,
        budget_tokens=spec.budget_tokens,
        context_json=json.dumps(spec.context) if spec.context else "",
    )
    try:
        started = await backends.executor.StartRun(request, metadata=tenant_metadata(tenant_id))
    except BaseException:
        await index.release(reservation.row_id)
        raise
    await index.complete(reservation.row_id, started.workflow_id)
    return Submitted(started.workflow_id, started.status, False)
