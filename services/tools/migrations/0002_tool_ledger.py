"""The tool-call ledger: one row per (workflow, call id), so a repeated Execute is answered
with the recorded outcome instead of running the tool again.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

ID = sa.String(128)
WHEN = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "tool_ledger",
        sa.Column("workflow_id", ID, nullable=False),
        sa.Column("call_id", ID, nullable=False),
        sa.Column("tenant_id", ID, nullable=False),
        sa.Column("tool_name", sa.Text, nullable=False),
        sa.Column("arguments_hash", sa.String(64), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("replica", ID, nullable=False),
        sa.Column("attempt", sa.Integer, nullable=False),
        sa.Column("started_at", WHEN, nullable=False),
        sa.Column("finished_at", WHEN, nullable=True),
        sa.Column("observation", sa.Text, nullable=False),
        sa.Column("error", sa.Text, nullable=False),
        sa.Column("blocked", sa.Boolean, nullable=False),
        sa.Column("block_reason", sa.Text, nullable=False),
        sa.Column("truncated", sa.Boolean, nullable=False),
        sa.Column("artifacts_json", sa.Text, nullable=False),
        sa.Column("duration_ms", sa.BigInteger, nullable=False),
        sa.PrimaryKeyConstraint("workflow_id", "call_id", name="pk_tool_ledger"),
    )
    op.create_index("ix_tool_ledger_started_at", "tool_ledger", ["started_at"])


def downgrade() -> None:
    op.drop_table("tool_ledger")
