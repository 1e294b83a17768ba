"""Sessions and their turns in SQL, per tenant: the conversation record the gateway owns.

A turn is written when its run starts (user message, workflow id) and completed from the
workflow's outcome the next time the session is read, so no process has to stay around
to record an answer.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import Connection, delete, insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine

from gateway.stores.db import session_turns, sessions, tasks
from shuttle.usage import TokenUsage
from shuttle.utf8 import utf8_size

TITLE_CHARS = 80
RUNNING = "running"
"""Status of a turn whose run has not ended yet."""


@dataclass(frozen=True)
class Turn:
    turn_id: int
    workflow_id: str | None
    user_message: str
    answer: str | None
    status: str
    usage: TokenUsage
    created_at: datetime

    @property
    def open(self) -> bool:
        return self.status == RUNNING


@dataclass(frozen=True)
class Session:
    session_id: str
    title: str
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True)
class SessionPage:
    sessions: list[Session]
    next_offset: int | None


def new_session_id() -> str:
    return f"sess-{uuid.uuid4()}"


class SessionStore:
    def __init__(self, engine: AsyncEngine, history_max_bytes: int = 4 * 1024 * 1024) -> None:
        self._engine = engine
        self.history_max_bytes = history_max_bytes
        """How much of a session's turns a new turn's run is given (see `history_of`)."""

    async def open(self, tenant_id: str, session_id: str, first_message: str) -> str:
        """The session's id, creating it (titled by its first message) on first use."""
        session_id = session_id or new_session_id()
        try:
            async with self._engine.begin() as conn:
                await conn.run_sync(create, tenant_id, session_id, first_message)
        except IntegrityError:
            pass  # it exists (perhaps created by a concurrent request): join it
        return session_id

    async def add_turn(
        self,
        tenant_id: str,
        session_id: str,
        user_message: str,
        *,
        workflow_id: str | None = None,
        answer: str | None = None,
    ) -> None:
        turn = NewTurn(tenant_id, session_id, user_message, workflow_id, answer)
        async with self._engine.begin() as conn:
            await conn.run_sync(record_turn, turn)

    async def complete_turn(
        self, turn_id: int, status: str, answer: str, usage: TokenUsage
    ) -> None:
        async with self._engine.begin() as conn:
            await conn.execute(
                update(session_turns)
                .where(session_turns.c.id == turn_id)
                .values(
                    status=status,
                    answer=answer,
                    input_tokens=usage.input_tokens,
                    output_tokens=usage.output_tokens,
                    total_tokens=usage.total_tokens,
                    cost_usd=usage.cost_usd,
                )
            )

    async def get(self, tenant_id: str, session_id: str) -> Session | None:
        async with self._engine.connect() as conn:
            row = (
                await conn.execute(
                    select(sessions).where(
                        sessions.c.tenant_id == tenant_id, sessions.c.session_id == session_id
                    )
                )
            ).first()
        if row is None:
            return None
        return Session(row.session_id, row.title, row.created_at, row.updated_at)

    async def session_of(self, tenant_id: str, workflow_id: str) -> str:
        async with self._engine.connect() as conn:
            found = await conn.scalar(
                select(session_turns.c.session_id).where(
                    session_turns.c.tenant_id == tenant_id,
                    session_turns.c.workflow_id == workflow_id,
                )
            )
        return str(found or "")

    async def turns(self, tenant_id: str, session_id: str) -> list[Turn]:
        async with self._engine.connect() as conn:
            rows = (
                await conn.execute(
                    select(session_turns)
                    .where(
                        session_turns.c.tenant_id == tenant_id,
                        session_turns.c.session_id == session_id,
                    )
                    .order_by(session_turns.c.id)
                )
            ).all()
        return [
            Turn(
                turn_id=r.id,
                workflow_id=r.workflow_id,
                user_message=r.user_message,
                answer=r.answer,
                status=r.status,
                usage=TokenUsage(
                    input_tokens=r.input_tokens,
                    output_tokens=r.output_tokens,
                    cost_usd=r.cost_usd,
                    total_tokens=r.total_tokens,
                ),
                created_at=r.created_at,
            )
            for r in rows
        ]

    async def page(self, tenant_id: str, offset: int, limit: int) -> SessionPage:
        """The tenant's sessions, most recently active first."""
        async with self._engine.connect() as conn:
            rows = (
                await conn.execute(
                    select(sessions)
                    .where(sessions.c.tenant_id == tenant_id)
                    .order_by(sessions.c.updated_at.desc(), sessions.c.session_id)
                    .offset(offset)
                    .limit(limit + 1)
                )
            ).all()
        found = [Session(r.session_id, r.title, r.created_at, r.updated_at) for r in rows]
        more = len(found) > limit
        return SessionPage(found[:limit], offset + limit if more else None)

    async def delete(self, tenant_id: str, session_id: str, workflow_ids: Collection[str]) -> None:
        """Remove the session, its turns and the task index rows of its workflows."""
        async with self._engine.begin() as conn:
            if workflow_ids:
                await conn.execute(
                    delete(tasks).where(
                        tasks.c.tenant_id == tenant_id,
                        tasks.c.workflow_id.in_(list(workflow_ids)),
                    )
                )
            for table in (session_turns, sessions):
                await conn.execute(
                    delete(table).where(
                        table.c.tenant_id == tenant_id, table.c.session_id == session_id
                    )
                )


def create(conn: Connection, tenant_id: str, session_id: str, first_message: str) -> None:
    """Insert the session, titled by its first message; IntegrityError if it exists."""
    now = datetime.now(UTC)
    conn.execute(
        insert(sessions).values(
            tenant_id=tenant_id,
            session_id=session_id,
            title=" ".join(first_message.split())[:TITLE_CHARS],
            created_at=now,
            updated_at=now,
        )
    )


@dataclass(frozen=True)
class NewTurn:
    tenant_id: str
    session_id: str
    user_message: str
    workflow_id: str | None = None
    """Set for the turn of a run that started: running until the run ends."""
    answer: str | None = None
    """Set for a turn that happened elsewhere (a client's earlier messages)."""
    new_session: bool = False
    """Create the session (titled by this turn) with its first turn."""


def record_turn(conn: Connection, turn: NewTurn) -> None:
    """Append the turn to its session (created first when new)."""
    now = datetime.now(UTC)
    if turn.new_session:
        create(conn, turn.tenant_id, turn.session_id, turn.user_message)  # sets updated_at
    else:
        conn.execute(
            update(sessions)
            .where(sessions.c.tenant_id == turn.tenant_id, sessions.c.session_id == turn.session_id)
            .values(updated_at=now)
        )
    conn.execute(
        insert(session_turns).values(
            tenant_id=turn.tenant_id,
            session_id=turn.session_id,
            workflow_id=turn.workflow_id,
            user_message=turn.user_message,
            answer=turn.answer,
            status=RUNNING if turn.workflow_id else "completed",
            created_at=now,
        )
    )


def history_of(turns: Sequence[Turn], max_bytes: int) -> list[tuple[str, str]]:
    """(role, content) pairs of the turns that have an answer, oldest first; a turn still
    running or without an answer contributes nothing, so the history always alternates.

    Only the newest turns whose texts come to at most `max_bytes` (UTF-8) are given: a
    session can outgrow the message that starts its next run, long before which it has
    outgrown any model's context window (the run's compaction fits what it gets to that)."""
    newest_first: list[tuple[str, str]] = []
    size = 0
    for turn in reversed(turns):
        if not turn.answer:
            continue
        size += utf8_size(turn.user_message) + utf8_size(turn.answer)
        if size > max_bytes:
            break
        newest_first += [("assistant", turn.answer), ("user", turn.user_message)]
    return newest_first[::-1]
