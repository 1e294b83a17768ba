"""Index workflows by tenant and status, so a new workflow counts its tenant's active runs
(SHUTTLE_TENANT_MAX_RUNS) without reading the tenant's finished ones.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-08
"""

from __future__ import annotations

from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_workflows_tenant_status", "workflows", ["tenant_id", "status"])


def downgrade() -> None:
    op.drop_index("ix_workflows_tenant_status", "workflows")
