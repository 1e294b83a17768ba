"""SQL tables of the tool host (audit log, approvals), portable across SQLite and PostgreSQL.

Created at start-up with `create_all`; they are the tools service's own and can join the
shared migrations later.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Column,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
)
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine

from shuttle.db import StoredString, StoredText, UtcDateTime

ID_LENGTH = 128

metadata = MetaData()

tool_audit = Table(
    "tool_audit",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("created_at", UtcDateTime, nullable=False),
    Column("tenant_id", String(ID_LENGTH), nullable=False),
    Column("workflow_id", String(ID_LENGTH), nullable=False),
    Column("call_id", String(ID_LENGTH), nullable=False),
    Column("agent_id", String(ID_LENGTH), nullable=False),
    Column("tool_name", String(ID_LENGTH), nullable=False),
    Column("arguments_json", Text, nullable=False),
    # ok | error | blocked
    Column("outcome", String(16), nullable=False),
    Column("error", StoredText, nullable=False),
    Column("blocked_by", String(ID_LENGTH), nullable=False),
    Column("block_reason", StoredText, nullable=False),
    # The tool's whole output, before any hook shortened it for the model.
    Column("result", StoredText, nullable=False),
    Column("duration_ms", BigInteger, nullable=False),
    Index("ix_tool_audit_tenant_workflow", "tenant_id", "workflow_id"),
)

tool_approvals = Table(
    "tool_approvals",
    metadata,
    # Looked up by the id a caller sends (StoredString, as stored: NUL matches itself).
    Column("id", StoredString(ID_LENGTH), primary_key=True),
    Column("tenant_id", String(ID_LENGTH), nullable=False),
    Column("workflow_id", String(ID_LENGTH), nullable=False),
    Column("call_id", String(ID_LENGTH), nullable=False),
    Column("tool_name", String(ID_LENGTH), nullable=False),
    Column("arguments_json", Text, nullable=False),
    Column("operation", String(ID_LENGTH), nullable=False),
    Column("risk_level", String(16), nullable=False),
    # pending | approved | denied | timeout
    Column("status", String(16), nullable=False),
    Column("decided_by", String(ID_LENGTH), nullable=False),
    Column("comment", StoredText, nullable=False),
    Column("requested_at", UtcDateTime, nullable=False),
    Column("expires_at", UtcDateTime, nullable=False),
    Column("decided_at", UtcDateTime, nullable=True),
    Index("ix_tool_approvals_tenant_workflow", "tenant_id", "workflow_id"),
)


async def create_schema(engine: AsyncEngine) -> None:
    """Create missing tables. Replicas starting together may race to create the same table;
    the loser sees it exist on the next attempt."""
    for attempt in range(3):
        try:
            async with engine.begin() as conn:
                await conn.run_sync(metadata.create_all)
            return
        except DBAPIError:
            if attempt == 2:
                raise
