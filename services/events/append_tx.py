"""The append transaction: seqs claimed from workflow counters for a group of batches, and
their rows inserted together.

One transaction may carry batches for many workflows (and several for one workflow): each
run of one workflow's batches bumps its ``last_seq`` once by their total and numbers them in
arrival order (a batch that also changes the row's status or outcome bumps alone), so seqs
stay consecutive per batch and gap-free per workflow; the rows of the whole group then go in
with one statement per table. Batches are taken in workflow-id order, so two replicas
committing groups that share workflows lock their rows in the same order and cannot deadlock.

A batch carrying a lease epoch is fenced in that same bump: its UPDATE also requires the
row's ``lease_epoch``, so a batch of an owner whose run was taken over matches no row and gets
no seq, at the cost of one more column compared (no extra statement).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import (
    Connection,
    RowMapping,
    Update,
    bindparam,
    case,
    literal,
    select,
    update,
)

from shuttle.sqlite_statements import first_value

from .bulk_insert import insert_rows
from .errors import EventsError, FailedPrecondition, Fenced, InvalidArgument, NotFound
from .lifecycle import RowUpdate, derive_update
from .models import WORKFLOW_ROW, appends, events, tool_results, workflows
from .records import (
    TERMINAL_STATUSES,
    Appended,
    AppendRequest,
    NewEvent,
    StoredEvent,
)
from .rows import event_row

Outcome = Appended | EventsError
"""What one batch of a group got: its seqs, or the error that refused it alone."""


@dataclass
class _Rows:
    appends: list[dict[str, Any]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    tool_results: list[dict[str, Any]] = field(default_factory=list)


def append_group(
    conn: Connection,
    requests: Sequence[AppendRequest],
    now: datetime,
    ephemeral: frozenset[str],
) -> list[Outcome]:
    """Append every batch of `requests` inside `conn`'s transaction; outcomes in request
    order. A batch refused on its own (unknown workflow, closed log, a retry found in
    ``appends``) changes nothing and leaves the others to commit. A repeated batch that
    slipped past the counter check fails the ``appends`` insert (IntegrityError), which the
    caller must answer by rolling the whole group back.

    Synchronous, so a whole transaction can run in one call on a database thread (see
    ``shuttle.sql_transactions``) or through ``AsyncConnection.run_sync``."""
    outcomes: list[Outcome | None] = [None] * len(requests)
    updates = [derive_update(request.batch) for request in requests]
    rows = _Rows()
    # Stable: a workflow's batches keep their arrival order.
    order = sorted(range(len(requests)), key=lambda i: requests[i].workflow_id)
    for run in _runs(order, requests, updates):
        first = requests[run[0]]
        count = sum(len(requests[i].batch) for i in run)
        last_seq = first_value(conn, *_bump_for(first, updates[run[0]], count, now))
        if last_seq is None:
            for index in run:
                try:
                    outcomes[index] = _unbumped_answer(conn, requests[index])
                except EventsError as refused:
                    outcomes[index] = refused
            continue
        next_seq = last_seq - count + 1
        for index in run:
            outcomes[index] = _stored(requests[index], next_seq, now, ephemeral, rows)
            next_seq += len(requests[index].batch)
    insert_rows(conn, appends, rows.appends)
    insert_rows(conn, events, rows.events)
    insert_rows(conn, tool_results, rows.tool_results)
    return [outcome for outcome in outcomes if outcome is not None]


def _runs(
    order: list[int], requests: Sequence[AppendRequest], updates: Sequence[RowUpdate]
) -> Iterator[list[int]]:
    """`order` cut into runs sharing one counter bump: consecutive batches of one workflow
    that move only its counter; a batch that changes more of the row goes alone."""
    run: list[int] = []
    for index in order:
        if run and _joins(requests[run[-1]], updates[run[-1]], requests[index], updates[index]):
            run.append(index)
            continue
        if run:
            yield run
        run = [index]
    if run:
        yield run


def _joins(
    previous: AppendRequest, previous_update: RowUpdate, request: AppendRequest, update: RowUpdate
) -> bool:
    return (
        _plain(previous_update)
        and _plain(update)
        and request.workflow_id == previous.workflow_id
        and request.tenant_id == previous.tenant_id
        and request.lease_epoch == previous.lease_epoch
    )


def _plain(row_update: RowUpdate) -> bool:
    return row_update.status is None and not row_update.columns()


def _bump_for(
    request: AppendRequest, row_update: RowUpdate, count: int, now: datetime
) -> tuple[Update, dict[str, Any]]:
    """The counter bump for `count` events of `request`'s workflow, and its parameters."""
    params: dict[str, Any] = {
        "bump_workflow_id": request.workflow_id,
        "bump_tenant_id": request.tenant_id,
        "count": count,
        "now": now,
    }
    columns = row_update.columns()
    status = row_update.status
    statement = _bump_statement(
        tuple(sorted(columns)),
        status is not None,
        status is not None and status.is_terminal,
        fenced=request.lease_epoch > 0,
    )
    if request.lease_epoch:
        params["fence_epoch"] = request.lease_epoch
    params.update({f"v_{name}": value for name, value in columns.items()})
    if status is not None:
        params["v_status"] = status.value
    return statement, params


def _stored(
    request: AppendRequest, first_seq: int, now: datetime, ephemeral: frozenset[str], rows: _Rows
) -> Appended:
    """The batch numbered from `first_seq`, its rows queued on `rows`."""
    batch = request.batch
    stored = [
        StoredEvent(
            workflow_id=request.workflow_id,
            seq=first_seq + index,
            type=event.type,
            agent_id=event.agent_id,
            message=event.message,
            payload_json=event.payload_json or "{}",
            timestamp=event.timestamp or now,
            trace_id=event.trace_id,
        )
        for index, event in enumerate(batch)
    ]
    if request.producer_id:
        rows.appends.append(
            {
                "workflow_id": request.workflow_id,
                "producer_id": request.producer_id,
                "batch_seq": request.batch_seq,
                "first_seq": first_seq,
                "count": len(batch),
            }
        )
    rows.events.extend(event_row(event) for event in stored if event.type not in ephemeral)
    rows.tool_results.extend(
        {
            "workflow_id": request.workflow_id,
            "seq": stored_event.seq,
            "tool_name": event.tool_name,
            "result": event.full_result,
        }
        for event, stored_event in zip(batch, stored, strict=True)
        if event.full_result is not None
    )
    return Appended(events=stored, seqs=[event.seq for event in stored])


def _bump(values: dict[str, Any], fenced: bool) -> Update:
    """The counter bump; it comes first in a batch's work: it takes the row's write lock
    (PostgreSQL) or the database's (SQLite) before anything is read, so SQLite never has to
    upgrade a read transaction. `fenced`: only while the lease is at ``fence_epoch``."""
    statement = update(workflows).where(
        workflows.c.id == bindparam("bump_workflow_id"),
        workflows.c.tenant_id == bindparam("bump_tenant_id"),
        workflows.c.stream_ended.is_(False),
    )
    if fenced:
        statement = statement.where(workflows.c.lease_epoch == bindparam("fence_epoch"))
    return statement.values(values).returning(workflows.c.last_seq)


# One bound value each rather than one list Core expands as it runs, so the statement also
# runs straight on sqlite3 (shuttle.sqlite_statements).
_TERMINAL_VALUES = [literal(status.value) for status in TERMINAL_STATUSES]


@functools.cache
def _bump_statement(
    columns: tuple[str, ...], sets_status: bool, terminal: bool, *, fenced: bool
) -> Update:
    """The bump of a batch that also sets `columns` (values bound as ``v_<name>``) and maybe
    the status (``v_status``), fenced on the lease epoch or not. Built once per shape:
    composing an UPDATE per lifecycle batch, then its cache key, cost more than running it (a
    run's closing batch took 0.93 ms of CPU in-process, 0.38 ms with the statement built
    once)."""
    values: dict[str, Any] = {
        "last_seq": workflows.c.last_seq + bindparam("count"),
        "updated_at": bindparam("now"),
        **{name: bindparam(f"v_{name}", type_=workflows.c[name].type) for name in columns},
    }
    if sets_status:
        # A finished workflow stays finished whatever a late producer reports.
        values["status"] = case(
            (workflows.c.status.in_(_TERMINAL_VALUES), workflows.c.status),
            else_=bindparam("v_status", type_=workflows.c.status.type),
        )
        if terminal:
            # The run is over: its lease means nothing more (the owner stays on record).
            values["lease_expires_at"] = None
    return _bump(values, fenced)


def _unbumped_answer(conn: Connection, request: AppendRequest) -> Appended:
    """The counter bump matched no row: an earlier append of this very batch whose log has
    ended or whose lease moved on since (its seqs stand), else Fenced when the lease is at
    another epoch than the batch's, else the closed-log answer (NotFound /
    FailedPrecondition)."""
    if request.producer_id:
        earlier = earlier_append(conn, request)
        if earlier is not None:
            return repeat_of(earlier, request)
    row = workflow_row(conn, request.workflow_id, request.tenant_id)
    if request.lease_epoch and row["lease_epoch"] != request.lease_epoch:
        raise Fenced(
            f"fenced: workflow {request.workflow_id!r} is leased at epoch {row['lease_epoch']} "
            f"(to {row['lease_owner'] or 'nobody'!r}), this batch carries lease epoch "
            f"{request.lease_epoch}: another executor has the run; stop it without appending"
        )
    return _closed_log_answer(row, request)


def workflow_row(
    conn: Connection, workflow_id: str, tenant_id: str, *, with_spec: bool = False
) -> RowMapping:
    """The workflow's row (its spec only `with_spec`); NotFound when missing or owned by
    another tenant."""
    query = _WORKFLOW_WITH_SPEC if with_spec else _WORKFLOW
    found = conn.execute(query, {"b_id": workflow_id, "b_tenant": tenant_id})
    return _found(found.mappings().one_or_none(), workflow_id)


# Built once: every stream, lookup and lease renewal reads the row, and composing the
# statement cost more CPU than running it.
_WORKFLOW = select(*WORKFLOW_ROW).where(
    workflows.c.id == bindparam("b_id"), workflows.c.tenant_id == bindparam("b_tenant")
)
_WORKFLOW_WITH_SPEC = select(workflows).where(
    workflows.c.id == bindparam("b_id"), workflows.c.tenant_id == bindparam("b_tenant")
)


def _found(row: RowMapping | None, workflow_id: str) -> RowMapping:
    if row is None:
        raise NotFound(f"workflow {workflow_id!r} not found")
    return row


def earlier_append(conn: Connection, request: AppendRequest) -> RowMapping | None:
    """The record of an earlier append of this batch, after checking the caller's tenant."""
    workflow_row(conn, request.workflow_id, request.tenant_id)
    query = select(appends.c.first_seq, appends.c.count).where(
        appends.c.workflow_id == request.workflow_id,
        appends.c.producer_id == request.producer_id,
        appends.c.batch_seq == request.batch_seq,
    )
    return conn.execute(query).mappings().one_or_none()


def repeat_of(earlier: RowMapping, request: AppendRequest) -> Appended:
    count: int = earlier["count"]
    if count != len(request.batch):
        raise InvalidArgument(
            f"batch_seq {request.batch_seq} of producer {request.producer_id!r} was appended "
            f"with {count} events; this request has {len(request.batch)}: a retry must resend "
            "the same batch"
        )
    first: int = earlier["first_seq"]
    return Appended(events=[], seqs=list(range(first, first + count)), repeated=True)


def _closed_log_answer(row: RowMapping, request: AppendRequest) -> Appended:
    """The workflow's log has ended. A lone STREAM_END then is the producer closing a log
    the service already closed after its terminal event: it gets that STREAM_END's seq
    back. Anything else is refused."""
    last_seq: int = row["last_seq"]
    if _types(request.batch) == ["STREAM_END"]:
        return Appended(events=[], seqs=[last_seq], repeated=True)
    raise FailedPrecondition(
        f"workflow {request.workflow_id!r} has ended (its log holds STREAM_END at seq "
        f"{last_seq}); nothing more can be appended"
    )


def _types(batch: Sequence[NewEvent]) -> list[str]:
    return [event.type for event in batch]
