"""SQL schema of the workflow log (SQLAlchemy Core), portable across SQLite and PostgreSQL."""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
)

from shuttle.db import UtcDateTime

# Ids are short tokens ("wf-" + uuid4, tenant names); the length is checked before insert so
# PostgreSQL's VARCHAR limit is never the first to complain.
ID_LENGTH = 128


metadata = MetaData()

workflows = Table(
    "workflows",
    metadata,
    Column("id", String(ID_LENGTH), primary_key=True),
    Column("tenant_id", String(ID_LENGTH), nullable=False),
    Column("owner", Text, nullable=False, default=""),
    Column("status", String(16), nullable=False),
    Column("query", Text, nullable=False, default=""),
    Column("session_id", String(ID_LENGTH), nullable=False, default=""),
    # The seq source of truth: bumped in the transaction that stores the events.
    Column("last_seq", BigInteger, nullable=False, default=0),
    # Set by STREAM_END: the log is closed and refuses further appends.
    Column("stream_ended", Boolean, nullable=False, default=False),
    Column("result", Text, nullable=False, default=""),
    Column("error", Text, nullable=False, default=""),
    Column("input_tokens", BigInteger, nullable=False, default=0),
    Column("output_tokens", BigInteger, nullable=False, default=0),
    Column("total_tokens", BigInteger, nullable=False, default=0),
    Column("cost_usd", Float, nullable=False, default=0.0),
    Column("duration_ms", BigInteger, nullable=False, default=0),
    # Which executor replica runs the workflow and until when (see leases.py); the expiry is
    # cleared when the workflow ends.
    Column("lease_owner", Text, nullable=False, default=""),
    Column("lease_expires_at", UtcDateTime, nullable=True),
    Column("created_at", UtcDateTime, nullable=False),
    Column("updated_at", UtcDateTime, nullable=False),
    # The lease's fencing epoch, bumped by every claim (0: never leased), and how many claims
    # followed a lapse (see leases.py). Server defaults, like the revision that added them,
    # so inserts that predate them still work.
    Column("lease_epoch", BigInteger, nullable=False, server_default="0"),
    Column("takeovers", Integer, nullable=False, server_default="0"),
    # The run's request as the executor gave it, for whichever replica takes the run over.
    Column("spec", Text, nullable=False, server_default=""),
    Index("ix_workflows_tenant_session", "tenant_id", "session_id"),
    # A new workflow counts its tenant's active ones (see tenant_runs.py).
    Index("ix_workflows_tenant_status", "tenant_id", "status"),
    # Retention purges by age of last activity.
    Index("ix_workflows_updated_at", "updated_at"),
    # The lease sweep looks for lapsed leases; ended workflows have none (see leases.py).
    Index("ix_workflows_lease_expires_at", "lease_expires_at"),
)

# The row as most reads and lease answers want it: without the run's spec, which may run to
# megabytes and only GetWorkflow and claims return.
WORKFLOW_ROW = tuple(column for column in workflows.c if column.name != "spec")

events = Table(
    "events",
    metadata,
    Column(
        "workflow_id",
        String(ID_LENGTH),
        ForeignKey("workflows.id", ondelete="CASCADE"),
        primary_key=True,
    ),
    Column("seq", BigInteger, primary_key=True, autoincrement=False),
    Column("type", String(40), nullable=False),
    Column("agent_id", Text, nullable=False, default=""),
    Column("message", Text, nullable=False, default=""),
    # The producer's JSON text, kept verbatim so large integers stay exact.
    Column("payload", Text, nullable=False, default="{}"),
    Column("timestamp", UtcDateTime, nullable=False),
    Column("trace_id", Text, nullable=False, default=""),
)

# One row per idempotent batch: a retried (producer_id, batch_seq) finds its seqs here. The
# primary key is what makes two replicas racing on the same retry store it only once.
appends = Table(
    "appends",
    metadata,
    Column(
        "workflow_id",
        String(ID_LENGTH),
        ForeignKey("workflows.id", ondelete="CASCADE"),
        primary_key=True,
    ),
    Column("producer_id", String(ID_LENGTH), primary_key=True),
    Column("batch_seq", BigInteger, primary_key=True, autoincrement=False),
    Column("first_seq", BigInteger, nullable=False),
    Column("count", BigInteger, nullable=False),
)

# Full TOOL_OBSERVATION results whose stream copy was cut (see payloads.py).
tool_results = Table(
    "tool_results",
    metadata,
    Column(
        "workflow_id",
        String(ID_LENGTH),
        ForeignKey("workflows.id", ondelete="CASCADE"),
        primary_key=True,
    ),
    Column("seq", BigInteger, primary_key=True, autoincrement=False),
    Column("tool_name", Text, nullable=False, default=""),
    Column("result", Text, nullable=False),
)
