"""Pages of stored events bounded by count and by bytes, read without loading the rows past
the bound: SQL sums the events' sizes (`sizes.sql_wire_bytes`) and returns only the rows
within it, so one page of large events costs the service its bound, not its count."""

from __future__ import annotations

import functools
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from sqlalchemy import BigInteger, Connection, Integer, Select, and_, bindparam, func, or_, select

from .append_tx import workflow_row
from .models import events, tool_results
from .records import StoredEvent
from .rows import stored_event
from .sizes import byte_length, sql_wire_bytes


@dataclass(frozen=True)
class SizedPage:
    """Durable events, oldest first; ``cut`` when the byte bound stopped the page before
    every row the count allowed, so more events follow its last one."""

    events: list[StoredEvent]
    cut: bool = False


def read_page(
    conn: Connection,
    workflow_id: str,
    tenant_id: str,
    *,
    from_seq: int,
    to_seq: int | None,
    limit: int,
    max_bytes: int,
    types: Collection[str] | None = None,
    whole_results: bool = False,
) -> SizedPage:
    """Up to `limit` durable events with ``from_seq <= seq <= to_seq`` (of `types`, when
    given) whose sizes add up to at most `max_bytes`; the first whatever its size. With
    `whole_results`, a cut TOOL_OBSERVATION counts its whole result too. NotFound when the
    workflow is not the tenant's."""
    workflow_row(conn, workflow_id, tenant_id)
    query = _page_query(to_seq is not None, bool(types), whole_results)
    bounds: dict[str, Any] = {
        "b_workflow": workflow_id,
        "b_from": from_seq,
        "b_to": to_seq,
        "b_limit": limit,
        "b_max_bytes": max_bytes,
    }
    if types:
        bounds["b_types"] = sorted(types)
    rows = conn.execute(query, bounds).mappings().all()
    if not rows:
        return SizedPage(events=[])
    return SizedPage(
        events=[stored_event(row) for row in rows], cut=len(rows) < rows[0]["candidates"]
    )


@functools.cache
def _page_query(bounded_above: bool, typed: bool, whole_results: bool) -> Select[Any]:
    """The page's rows, each with how many rows the count allowed (``candidates``). Built
    once per shape: every replay page runs it."""
    size = sql_wire_bytes(
        events.c.type, events.c.agent_id, events.c.message, events.c.payload, events.c.trace_id
    )
    source: Any = events
    if whole_results:
        source = events.outerjoin(
            tool_results,
            and_(
                tool_results.c.workflow_id == events.c.workflow_id,
                tool_results.c.seq == events.c.seq,
            ),
        )
        size = size + func.coalesce(byte_length(tool_results.c.result), 0)
    conditions = [
        events.c.workflow_id == bindparam("b_workflow"),
        events.c.seq >= bindparam("b_from"),
    ]
    if bounded_above:
        conditions.append(events.c.seq <= bindparam("b_to"))
    if typed:
        conditions.append(events.c.type.in_(bindparam("b_types", expanding=True)))
    # Only seqs and sizes go through the window: the rows' text is read once, for the page.
    candidates = (
        select(events.c.seq, size.label("size"))
        .select_from(source)
        .where(*conditions)
        .order_by(events.c.seq)
        .limit(bindparam("b_limit", type_=Integer))
        .subquery("candidates")
    )
    running = select(
        candidates.c.seq,
        candidates.c.size,
        func.sum(candidates.c.size).over(order_by=candidates.c.seq).label("running"),
        func.count().over().label("candidates"),
    ).subquery("running")
    return (
        select(events, running.c.candidates)
        .select_from(
            running.join(
                events,
                and_(
                    events.c.workflow_id == bindparam("b_workflow"),
                    events.c.seq == running.c.seq,
                ),
            )
        )
        # Sizes are positive, so only the first row's running total equals its size.
        .where(
            or_(
                running.c.running <= bindparam("b_max_bytes", type_=BigInteger),
                running.c.running == running.c.size,
            )
        )
        .order_by(events.c.seq)
    )
