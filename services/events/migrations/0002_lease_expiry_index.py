"""Index the run lease's expiry, so the sweep for lapsed leases reads only live leases.

Ended workflows have no expiry (it is cleared when they end), so the index holds only runs
in progress.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Workflows that ended before this revision keep an expiry; clear it like new ones.
    workflows = sa.table(
        "workflows", sa.column("status", sa.String), sa.column("lease_expires_at", sa.DateTime)
    )
    op.execute(
        workflows.update()
        .where(workflows.c.status.in_(["COMPLETED", "FAILED", "CANCELLED"]))
        .values(lease_expires_at=None)
    )
    op.create_index("ix_workflows_lease_expires_at", "workflows", ["lease_expires_at"])


def downgrade() -> None:
    op.drop_index("ix_workflows_lease_expires_at", "workflows")
