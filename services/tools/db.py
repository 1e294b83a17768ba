"""SQL tables of the tool host (audit log, approvals, call ledger), portable across SQLite
and PostgreSQL.

Alembic migrations in services/tools/migrations/ make them, with the service's own version
table; this metadata declares the tables the stores use and the latest revision makes.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Index,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
)
from sqlalchemy.ext.asyncio import AsyncEngine

from shuttle.db import StoredString, StoredText, UtcDateTime
from shuttle.migrations import Migrations

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

# One row per tool call of a workflow (services/tools/ledger.py): what a repeated Execute of
# the same call id is answered with, and who runs it meanwhile.
tool_ledger = Table(
    "tool_ledger",
    metadata,
    Column("workflow_id", StoredString(ID_LENGTH), nullable=False),
    Column("call_id", StoredString(ID_LENGTH), nullable=False),
    Column("tenant_id", String(ID_LENGTH), nullable=False),
    # As the caller named it: a model may name a tool that does not exist, at any length.
    Column("tool_name", StoredText, nullable=False),
    # sha256 of the arguments as canonical JSON: a repeat must send the same ones.
    Column("arguments_hash", String(64), nullable=False),
    # running | done
    Column("state", String(16), nullable=False),
    # The replica running it, and how many replicas have started it (a takeover adds one).
    Column("replica", String(ID_LENGTH), nullable=False),
    Column("attempt", Integer, nullable=False),
    Column("started_at", UtcDateTime, nullable=False),
    Column("finished_at", UtcDateTime, nullable=True),
    # The outcome, as ExecuteResponse carries it (artifacts as a JSON list).
    Column("observation", StoredText, nullable=False),
    Column("error", StoredText, nullable=False),
    Column("blocked", Boolean, nullable=False),
    Column("block_reason", StoredText, nullable=False),
    Column("truncated", Boolean, nullable=False),
    Column("artifacts_json", StoredText, nullable=False),
    Column("duration_ms", BigInteger, nullable=False),
    PrimaryKeyConstraint("workflow_id", "call_id", name="pk_tool_ledger"),
    Index("ix_tool_ledger_started_at", "started_at"),
)


MIGRATIONS = Migrations(
    component="tools",
    revisions="services.tools:migrations",
    version_table="alembic_version_tools",
    lock_key=0x5E_7E_47_03,
    metadata=metadata,
    # Tables `create_all` made from this metadata (in a var/shuttle.db, say) are kept.
    adopt_at="0001",
)


async def create_schema(engine: AsyncEngine) -> None:
    """Migrate the service's tables to the latest revision. Replicas starting together take
    turns under the migrations' lock, so none meets a table half made by another."""
    await MIGRATIONS.upgrade(engine)
