"""Durable runs: the lease's fencing epoch, the count of takeovers, and the run's spec.

A run whose lease lapses is claimed by another executor replica; each claim bumps
``lease_epoch``, and appends carrying an older epoch are refused, so a stalled owner cannot
write into a run taken over. ``spec`` keeps the run's request for the replica that takes it
over. Existing rows get 0, 0 and '' (never leased at an epoch, no spec).

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-20
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Server defaults: SQLite adds a NOT NULL column only with one, and old rows need a value.
    op.add_column(
        "workflows", sa.Column("lease_epoch", sa.BigInteger, nullable=False, server_default="0")
    )
    op.add_column(
        "workflows", sa.Column("takeovers", sa.Integer, nullable=False, server_default="0")
    )
    op.add_column("workflows", sa.Column("spec", sa.Text, nullable=False, server_default=""))


def downgrade() -> None:
    for column in ("spec", "takeovers", "lease_epoch"):
        op.drop_column("workflows", column)
