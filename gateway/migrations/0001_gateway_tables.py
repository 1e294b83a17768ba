"""The gateway's tables: API keys, submitted tasks, sessions and their turns.

The same tables as `create_all` of the gateway's metadata makes, so a database made that
way is stamped at this revision rather than refused (see shuttle.migrations).

Revision ID: 0001
Revises:
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

ID = sa.String(128)
WHEN = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "gateway_api_keys",
        sa.Column("key_id", sa.String(40), primary_key=True),
        sa.Column("tenant_id", ID, nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("key_hash", sa.String(64), nullable=False, unique=True),
        sa.Column("created_at", WHEN, nullable=False),
        sa.Column("revoked_at", WHEN, nullable=True),
    )
    op.create_index("ix_gateway_api_keys_tenant_id", "gateway_api_keys", ["tenant_id"])
    op.create_table(
        "gateway_tasks",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("tenant_id", ID, nullable=False),
        sa.Column("idempotency_key", sa.String(255), nullable=True),
        sa.Column("request_hash", sa.String(64), nullable=False),
        sa.Column("workflow_id", ID, nullable=True),
        sa.Column("query", sa.Text, nullable=False),
        sa.Column("created_at", WHEN, nullable=False),
        sa.UniqueConstraint("tenant_id", "idempotency_key", name="uq_gateway_tasks_idempotency"),
    )
    op.create_index("ix_gateway_tasks_created_at", "gateway_tasks", ["created_at"])
    op.create_table(
        "gateway_sessions",
        sa.Column("tenant_id", ID, primary_key=True),
        sa.Column("session_id", ID, primary_key=True),
        sa.Column("title", sa.String(200), nullable=False),
        sa.Column("created_at", WHEN, nullable=False),
        sa.Column("updated_at", WHEN, nullable=False),
    )
    op.create_index("ix_gateway_sessions_updated_at", "gateway_sessions", ["updated_at"])
    op.create_table(
        "gateway_session_turns",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("tenant_id", ID, nullable=False),
        sa.Column("session_id", ID, nullable=False),
        sa.Column("workflow_id", ID, nullable=True),
        sa.Column("user_message", sa.Text, nullable=False),
        sa.Column("answer", sa.Text, nullable=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("input_tokens", sa.BigInteger, nullable=False),
        sa.Column("output_tokens", sa.BigInteger, nullable=False),
        sa.Column("total_tokens", sa.BigInteger, nullable=False),
        sa.Column("cost_usd", sa.Float, nullable=False),
        sa.Column("created_at", WHEN, nullable=False),
    )
    op.create_index(
        "ix_gateway_session_turns_workflow_id", "gateway_session_turns", ["workflow_id"]
    )
    op.create_index(
        "ix_gateway_session_turns_session",
        "gateway_session_turns",
        ["tenant_id", "session_id", "id"],
    )


def downgrade() -> None:
    op.drop_table("gateway_session_turns")
    op.drop_table("gateway_sessions")
    op.drop_table("gateway_tasks")
    op.drop_table("gateway_api_keys")
