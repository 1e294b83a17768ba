"""The tools service's tables: the audit log of tool calls and the approvals.

The same tables as `create_all` of the service's metadata makes, so a database made that
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
        "tool_audit",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("created_at", WHEN, nullable=False),
        sa.Column("tenant_id", ID, nullable=False),
        sa.Column("workflow_id", ID, nullable=False),
        sa.Column("call_id", ID, nullable=False),
        sa.Column("agent_id", ID, nullable=False),
        sa.Column("tool_name", ID, nullable=False),
        sa.Column("arguments_json", sa.Text, nullable=False),
        sa.Column("outcome", sa.String(16), nullable=False),
        sa.Column("error", sa.Text, nullable=False),
        sa.Column("blocked_by", ID, nullable=False),
        sa.Column("block_reason", sa.Text, nullable=False),
        sa.Column("result", sa.Text, nullable=False),
        sa.Column("duration_ms", sa.BigInteger, nullable=False),
    )
    op.create_index("ix_tool_audit_tenant_workflow", "tool_audit", ["tenant_id", "workflow_id"])
    op.create_table(
        "tool_approvals",
        sa.Column("id", ID, primary_key=True),
        sa.Column("tenant_id", ID, nullable=False),
        sa.Column("workflow_id", ID, nullable=False),
        sa.Column("call_id", ID, nullable=False),
        sa.Column("tool_name", ID, nullable=False),
        sa.Column("arguments_json", sa.Text, nullable=False),
        sa.Column("operation", ID, nullable=False),
        sa.Column("risk_level", sa.String(16), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("decided_by", ID, nullable=False),
        sa.Column("comment", sa.Text, nullable=False),
        sa.Column("requested_at", WHEN, nullable=False),
        sa.Column("expires_at", WHEN, nullable=False),
        sa.Column("decided_at", WHEN, nullable=True),
    )
    op.create_index(
        "ix_tool_approvals_tenant_workflow", "tool_approvals", ["tenant_id", "workflow_id"]
    )


def downgrade() -> None:
    op.drop_table("tool_approvals")
    op.drop_table("tool_audit")
