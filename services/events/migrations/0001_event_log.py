"""Event log: workflows, events, idempotent appends, full tool results.

Revision ID: 0001
Revises:
Create Date: 2026-11-30
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
        "workflows",
        sa.Column("id", ID, primary_key=True),
        sa.Column("tenant_id", ID, nullable=False),
        sa.Column("owner", sa.Text, nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("query", sa.Text, nullable=False),
        sa.Column("session_id", ID, nullable=False),
        sa.Column("last_seq", sa.BigInteger, nullable=False),
        sa.Column("stream_ended", sa.Boolean, nullable=False),
        sa.Column("result", sa.Text, nullable=False),
        sa.Column("error", sa.Text, nullable=False),
        sa.Column("input_tokens", sa.BigInteger, nullable=False),
        sa.Column("output_tokens", sa.BigInteger, nullable=False),
        sa.Column("total_tokens", sa.BigInteger, nullable=False),
        sa.Column("cost_usd", sa.Float, nullable=False),
        sa.Column("duration_ms", sa.BigInteger, nullable=False),
        sa.Column("lease_owner", sa.Text, nullable=False),
        sa.Column("lease_expires_at", WHEN, nullable=True),
        sa.Column("created_at", WHEN, nullable=False),
        sa.Column("updated_at", WHEN, nullable=False),
    )
    op.create_index("ix_workflows_tenant_session", "workflows", ["tenant_id", "session_id"])
    op.create_index("ix_workflows_updated_at", "workflows", ["updated_at"])
    op.create_table(
        "events",
        sa.Column(
            "workflow_id",
            ID,
            sa.ForeignKey("workflows.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("seq", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("type", sa.String(40), nullable=False),
        sa.Column("agent_id", sa.Text, nullable=False),
        sa.Column("message", sa.Text, nullable=False),
        sa.Column("payload", sa.Text, nullable=False),
        sa.Column("timestamp", WHEN, nullable=False),
        sa.Column("trace_id", sa.Text, nullable=False),
    )
    op.create_table(
        "appends",
        sa.Column(
            "workflow_id",
            ID,
            sa.ForeignKey("workflows.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("producer_id", ID, primary_key=True),
        sa.Column("batch_seq", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("first_seq", sa.BigInteger, nullable=False),
        sa.Column("count", sa.BigInteger, nullable=False),
    )
    op.create_table(
        "tool_results",
        sa.Column(
            "workflow_id",
            ID,
            sa.ForeignKey("workflows.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("seq", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("tool_name", sa.Text, nullable=False),
        sa.Column("result", sa.Text, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("tool_results")
    op.drop_table("appends")
    op.drop_table("events")
    op.drop_index("ix_workflows_updated_at", "workflows")
    op.drop_index("ix_workflows_tenant_session", "workflows")
    op.drop_table("workflows")
