"""The gateway's own tables (API keys, submitted tasks, sessions) in the shared SQL database.

Alembic migrations in gateway/migrations/ make them, with the gateway's own version table;
this metadata declares the tables the stores use and the latest revision makes.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Column,
    DateTime,
    Float,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    UniqueConstraint,
)
from sqlalchemy.ext.asyncio import AsyncEngine

from shuttle.db import StoredString, StoredText
from shuttle.migrations import Migrations

metadata = MetaData()

api_keys = Table(
    "gateway_api_keys",
    metadata,
    Column("key_id", String(40), primary_key=True),
    Column("tenant_id", String(128), nullable=False, index=True),
    Column("name", String(200), nullable=False, default=""),
    # SHA-256 hex of the whole key; the key itself is never stored.
    Column("key_hash", String(64), nullable=False, unique=True),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("revoked_at", DateTime(timezone=True), nullable=True),
)

tasks = Table(
    "gateway_tasks",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("tenant_id", String(128), nullable=False),
    Column("idempotency_key", String(255), nullable=True),
    # SHA-256 of the request body: a reused key with another body is refused.
    Column("request_hash", String(64), nullable=False),
    # NULL while the request holding the key is still starting the run.
    Column("workflow_id", StoredString(128), nullable=True),
    Column("query", StoredText, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False, index=True),
    # The id the client gave the message asking for the task (AG-UI), when it gave one.
    Column("client_message_id", StoredString(128), nullable=True),
    UniqueConstraint("tenant_id", "idempotency_key", name="uq_gateway_tasks_idempotency"),
)

# Conversations: a session per (tenant, id), its turns in order. A turn imported from an
# OpenAI-style message list has no workflow.
sessions = Table(
    "gateway_sessions",
    metadata,
    Column("tenant_id", String(128), primary_key=True),
    # Ids a client sends, looked up as sent: stored as the same StoredString they are
    # compared as, an id holding NUL matches itself on every backend.
    Column("session_id", StoredString(128), primary_key=True),
    Column("title", StoredString(200), nullable=False, default=""),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False, index=True),
)

session_turns = Table(
    "gateway_session_turns",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("tenant_id", String(128), nullable=False),
    Column("session_id", StoredString(128), nullable=False),
    Column("workflow_id", StoredString(128), nullable=True, index=True),
    Column("user_message", StoredText, nullable=False),
    # NULL until the run ended (filled from the workflow's outcome when next read).
    Column("answer", StoredText, nullable=True),
    Column("status", String(16), nullable=False),
    Column("input_tokens", BigInteger, nullable=False, default=0),
    Column("output_tokens", BigInteger, nullable=False, default=0),
    Column("total_tokens", BigInteger, nullable=False, default=0),
    Column("cost_usd", Float, nullable=False, default=0.0),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Index("ix_gateway_session_turns_session", "tenant_id", "session_id", "id"),
)


MIGRATIONS = Migrations(
    component="gateway",
    revisions="gateway:migrations",
    version_table="alembic_version_gateway",
    lock_key=0x5E_7E_47_02,
    metadata=metadata,
    # Tables `create_all` made from this metadata (in a var/shuttle.db, say) are kept.
    adopt_at="0001",
)


async def create_schema(engine: AsyncEngine) -> None:
    """Migrate the gateway's tables to the latest revision (at start-up, by every replica)."""
    await MIGRATIONS.upgrade(engine)
