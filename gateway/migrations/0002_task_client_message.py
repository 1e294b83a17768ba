"""Tasks remember the id a client gave the message that asked for them (AG-UI's user
message), so a stream that rejoins the run names that message as the client does.

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


def upgrade() -> None:
    op.add_column("gateway_tasks", sa.Column("client_message_id", sa.String(128), nullable=True))


def downgrade() -> None:
    op.drop_column("gateway_tasks", "client_message_id")
