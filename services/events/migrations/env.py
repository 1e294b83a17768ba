"""Alembic environment of the events service: runs on the connection `migrate()` passes in."""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection, text

from services.events.migrate import ADVISORY_LOCK_KEY, VERSION_TABLE
from services.events.models import metadata

connection = context.config.attributes.get("connection")
if not isinstance(connection, Connection):
    raise SystemExit(
        "run the events migrations with `make migrate` (python -m services.events.admin migrate)"
    )

context.configure(
    connection=connection,
    target_metadata=metadata,
    version_table=VERSION_TABLE,
    # SQLite alters tables by copying them; batch mode does that for later migrations.
    render_as_batch=connection.dialect.name == "sqlite",
)
with context.begin_transaction():
    if connection.dialect.name == "postgresql":
        connection.execute(text(f"SELECT pg_advisory_xact_lock({ADVISORY_LOCK_KEY})"))
    context.run_migrations()
