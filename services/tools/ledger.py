"""The tool-call ledger in SQL: one row per (workflow id, call id), with the call's state
(running, done), who runs it, and once done everything ExecuteResponse carries.

A first call costs one INSERT (running) before the tool runs and one UPDATE (done, the
outcome) after it, each one statement in its own transaction: on a SQLite file in a file of
its own, written in place (ledger_storage.py); on a database server through the pool, so
that a call waiting hours for an approval holds no connection. Repeats read the row;
nothing else is read on the first call.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Collection
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from sqlalchemy import Connection, Executable, bindparam, delete, select, update
from sqlalchemy.engine import Row
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.sql.dml import UpdateBase

from services.tools.db import tool_ledger
from shuttle.periodic import Periodic
from shuttle.sql_transactions import WriteTransactions
from shuttle.tool_calls import Artifact, ToolCall, ToolOutcome
from shuttle.utf8 import storable_text

log = logging.getLogger(__name__)

RUNNING = "running"
DONE = "done"
# How often each replica deletes the rows past the retention.
PURGE_INTERVAL_SECONDS = 3600.0


def arguments_hash(arguments_json: str) -> str:
    """sha256 of the arguments as canonical JSON (sorted keys, no spaces), so a repeat that
    spells the same object differently still matches; text that is no JSON object as sent."""
    text = arguments_json.strip() or "{}"
    try:
        canonical = json.dumps(json.loads(text), sort_keys=True, separators=(",", ":"))
    except (ValueError, RecursionError):
        canonical = arguments_json
    return hashlib.sha256(canonical.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True)
class Fingerprint:
    """What a repeat of a call id must match: the tenant, the tool and the arguments."""

    tenant_id: str
    tool_name: str
    arguments_hash: str

    @classmethod
    def of(cls, call: ToolCall) -> Fingerprint:
        # As stored: a name the database could not hold as sent compares as it was stored.
        return cls(
            call.tenant_id, storable_text(call.tool_name), arguments_hash(call.arguments_json)
        )


@dataclass(frozen=True)
class LedgerEntry:
    fingerprint: Fingerprint
    state: str
    replica: str
    attempt: int
    started_at: datetime
    outcome: ToolOutcome | None
    """Set once the call is done."""


def _key(call: ToolCall) -> dict[str, str]:
    return {"key_workflow_id": call.workflow_id, "key_call_id": call.call_id}


# Built once: a statement made per call cost more CPU (building, then keying it for the
# compiled cache) than running it. UPDATE sets the columns its parameters name.
_ROW = (
    tool_ledger.c.workflow_id == bindparam("key_workflow_id"),
    tool_ledger.c.call_id == bindparam("key_call_id"),
)
_RUNNING_ROW = (*_ROW, tool_ledger.c.state == bindparam("key_state"))
_INSERT = tool_ledger.insert()
_FINISH = update(tool_ledger).where(*_RUNNING_ROW)
_TAKE_OVER = update(tool_ledger).where(
    *_RUNNING_ROW, tool_ledger.c.attempt == bindparam("key_attempt")
)
_GET = select(tool_ledger).where(*_ROW)
_PURGE = delete(tool_ledger).where(tool_ledger.c.started_at < bindparam("older_than"))


def _artifacts_json(outcome: ToolOutcome) -> str:
    return json.dumps(
        [
            {"name": a.name, "mime_type": a.mime_type, "size_bytes": a.size_bytes, "uri": a.uri}
            for a in outcome.artifacts
        ],
        ensure_ascii=False,
    )


def _entry(row: Row[Any]) -> LedgerEntry:
    outcome = None
    if row.state == DONE:
        outcome = ToolOutcome(
            call_id=row.call_id,
            observation=row.observation,
            error=row.error,
            blocked=row.blocked,
            block_reason=row.block_reason,
            truncated=row.truncated,
            artifacts=tuple(Artifact(**item) for item in json.loads(row.artifacts_json)),
            duration_ms=row.duration_ms,
        )
    return LedgerEntry(
        fingerprint=Fingerprint(row.tenant_id, row.tool_name, row.arguments_hash),
        state=row.state,
        replica=row.replica,
        attempt=row.attempt,
        started_at=row.started_at,
        outcome=outcome,
    )


def execute_statement(conn: Connection, statement: Executable, parameters: dict[str, Any]) -> int:
    """Rows the statement touched."""
    return conn.execute(statement, parameters).rowcount


class CallStatements(Protocol):
    """Where the statements of each call run, each one its own transaction."""

    async def execute(self, statement: UpdateBase, parameters: dict[str, Any]) -> int:
        """Rows the statement touched."""
        ...


class TransactionStatements:
    """Each statement as a write transaction of its own."""

    def __init__(self, writes: WriteTransactions) -> None:
        self._writes = writes

    async def execute(self, statement: UpdateBase, parameters: dict[str, Any]) -> int:
        return await self._writes.write(execute_statement, statement, parameters)


class AutocommitStatements:
    """Each statement as a transaction of its own by autocommit, for a database server:
    without BEGIN and COMMIT, two round trips fewer (a tenth to a fifth of a call's ledger
    time on the local PostgreSQL, `python -m bench.suites.tool_ledger`)."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine.execution_options(isolation_level="AUTOCOMMIT")

    async def execute(self, statement: UpdateBase, parameters: dict[str, Any]) -> int:
        async with self._engine.connect() as conn:
            return (await conn.execute(statement, parameters)).rowcount


class CallLedger:
    """The ledger's rows; SQLAlchemy errors pass through (callers decide what they mean)."""

    def __init__(
        self,
        engine: AsyncEngine,
        writes: WriteTransactions,
        call_statements: CallStatements | None = None,
    ) -> None:
        """`call_statements`, when given, runs the statements of each call (one row each);
        `writes` the rest (the purge)."""
        self._engine = engine
        self._writes = writes
        self._call_statements = call_statements or TransactionStatements(writes)

    async def start(
        self, call: ToolCall, fingerprint: Fingerprint, replica: str, now: datetime
    ) -> None:
        """Record the call as running on `replica`; IntegrityError when its id is known."""
        values = {
            "workflow_id": call.workflow_id,
            "call_id": call.call_id,
            "tenant_id": fingerprint.tenant_id,
            "tool_name": fingerprint.tool_name,
            "arguments_hash": fingerprint.arguments_hash,
            "state": RUNNING,
            "replica": replica,
            "attempt": 1,
            "started_at": now,
            "finished_at": None,
            "observation": "",
            "error": "",
            "blocked": False,
            "block_reason": "",
            "truncated": False,
            "artifacts_json": "[]",
            "duration_ms": 0,
        }
        await self._call_statements.execute(_INSERT, values)

    async def take_over(
        self, call: ToolCall, stale: LedgerEntry, replica: str, now: datetime
    ) -> bool:
        """Make a running row `replica`'s if it is still the attempt `stale` saw: of several
        replicas taking over at once, exactly one wins."""
        parameters = {
            **_key(call),
            "key_state": RUNNING,
            "key_attempt": stale.attempt,
            "replica": replica,
            "attempt": stale.attempt + 1,
            "started_at": now,
        }
        return await self._call_statements.execute(_TAKE_OVER, parameters) == 1

    async def finish(self, call: ToolCall, outcome: ToolOutcome, now: datetime) -> None:
        """Record the outcome; the first attempt to finish is the one recorded."""
        parameters = {
            **_key(call),
            "key_state": RUNNING,
            "state": DONE,
            "finished_at": now,
            "observation": outcome.observation,
            "error": outcome.error,
            "blocked": outcome.blocked,
            "block_reason": outcome.block_reason,
            "truncated": outcome.truncated,
            "artifacts_json": _artifacts_json(outcome),
            "duration_ms": outcome.duration_ms,
        }
        await self._call_statements.execute(_FINISH, parameters)

    async def get(self, call: ToolCall) -> LedgerEntry | None:
        async with self._engine.connect() as conn:
            row = (await conn.execute(_GET, _key(call))).first()
        return None if row is None else _entry(row)

    async def forget(self, tenant_id: str, workflow_ids: Collection[str]) -> int:
        """Delete the tenant's rows of these workflows."""
        statement = delete(tool_ledger).where(
            tool_ledger.c.tenant_id == tenant_id, tool_ledger.c.workflow_id.in_(list(workflow_ids))
        )
        return await self._writes.write(execute_statement, statement, {})

    async def purge(self, older_than: datetime) -> int:
        """Delete the rows of calls started before `older_than`."""
        return await self._writes.write(execute_statement, _PURGE, {"older_than": older_than})


class LedgerRetention:
    """Deletes the rows of calls started more than `retention_hours` ago: at start, then
    every `interval_seconds`; a failed pass (the database away) is logged and retried."""

    def __init__(
        self,
        ledger: CallLedger,
        retention_hours: float,
        interval_seconds: float = PURGE_INTERVAL_SECONDS,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self._ledger = ledger
        self._retention = timedelta(hours=retention_hours)
        self._clock = clock
        self._periodic = Periodic("purging the tool-call ledger", self.run_once, interval_seconds)

    def start(self) -> None:
        self._periodic.start()

    async def stop(self) -> None:
        await self._periodic.stop()

    async def run_once(self) -> int:
        purged = await self._ledger.purge(self._clock() - self._retention)
        if purged:
            log.info("purged old tool-call ledger rows", extra={"rows": purged})
        return purged
