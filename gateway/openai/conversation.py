"""Which session a chat completion joins: the one it names, or the one a `user`'s earlier
calls of the same conversation opened."""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from typing import Protocol

from gateway.backends import Backends
from gateway.conversations import settled_turns
from gateway.errors import ApiError
from gateway.stores.sessions import SessionStore
from gateway.submit import TaskSpec


class NamesSession(Protocol):
    @property
    def user(self) -> str | None: ...

    @property
    def shuttle_session_id(self) -> str | None: ...


def user_session_id(user: str, spec: TaskSpec) -> str:
    """The session a `user`'s conversation opened: named by the user and its first message,
    so each follow-up, which repeats the conversation, finds it again."""
    first = spec.earlier[0][1] if spec.earlier else spec.query
    digest = hashlib.sha256(json.dumps([user, first]).encode()).hexdigest()[:32]
    return f"sess-oa-{digest}"


async def conversation_of(
    body: NamesSession,
    spec: TaskSpec,
    tenant: str,
    backends: Backends,
    sessions: SessionStore,
) -> TaskSpec:
    """`spec` joined to the session the request names, if it names one."""
    if body.shuttle_session_id:
        if await sessions.get(tenant, body.shuttle_session_id) is None:
            raise ApiError(
                404, "session_not_found", f"session {body.shuttle_session_id!r} not found"
            )
        return replace(spec, session_id=body.shuttle_session_id, earlier=())
    if not body.user:
        return spec
    session_id = user_session_id(body.user, spec)
    if await sessions.get(tenant, session_id) is None:
        return replace(spec, session_id=session_id)
    turns = await settled_turns(sessions, backends, tenant, session_id)
    said = tuple(
        pair
        for turn in turns
        for pair in (("user", turn.user_message), ("assistant", turn.answer or ""))
        if pair[1]
    )
    if said != spec.earlier:
        return spec  # another conversation of the same start: a session of its own
    return replace(spec, session_id=session_id, earlier=())
