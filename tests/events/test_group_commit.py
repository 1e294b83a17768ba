"""Group commit: many batches (any workflows) in one transaction, on SQLite and PostgreSQL,
with gap-free seqs, idempotent retries and per-batch refusals intact."""

from __future__ import annotations

import asyncio

from sqlalchemy import event as sa_event
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from services.events.append_tx import Outcome
from services.events.errors import FailedPrecondition, NotFound
from services.events.group_commit import MAX_GROUP_EVENTS
from services.events.hot import MemoryHotTier
from services.events.log import WRITER_LANES, EventLog
from services.events.models import appends, events
from services.events.records import Appended, AppendRequest
from services.events.store import SqlEventStore
from tests.support.databases import EngineMaker

from .helpers import new, progress


def request(workflow_id: str, count: int, producer: str = "", batch_seq: int = 0) -> AppendRequest:
    return AppendRequest(workflow_id, "t1", progress(count), producer, batch_seq)


def ok(outcome: Outcome) -> list[int]:
    assert isinstance(outcome, Appended), outcome
    return outcome.seqs


async def stored_seqs(engine: AsyncEngine, workflow_id: str) -> list[int]:
    async with engine.connect() as conn:
        rows = await conn.execute(
            select(events.c.seq).where(events.c.workflow_id == workflow_id).order_by(events.c.seq)
        )
        return [int(seq) for seq in rows.scalars()]


def count_commits(store: SqlEventStore) -> list[int]:
    commits: list[int] = []
    for engine in store.append_engines:
        sa_event.listen(engine, "commit", lambda _conn: commits.append(1))
    return commits


async def test_one_group_numbers_each_workflow_from_one_in_arrival_order(
    store: SqlEventStore, engine: AsyncEngine
) -> None:
    for workflow_id in ("wf-b", "wf-a"):
        await store.create_workflow(workflow_id=workflow_id, tenant_id="t1")
    outcomes = await store.append_many(
        [request("wf-b", 2), request("wf-a", 3), request("wf-b", 1), request("wf-a", 1)]
    )
    assert [ok(outcome) for outcome in outcomes] == [[1, 2], [1, 2, 3], [3], [4]]
    assert await stored_seqs(engine, "wf-a") == [1, 2, 3, 4]
    assert await stored_seqs(engine, "wf-b") == [1, 2, 3]
    assert (await store.get_workflow("wf-a", "t1")).last_seq == 4


async def test_lifecycle_batches_between_plain_ones_keep_their_order_and_effects(
    store: SqlEventStore, engine: AsyncEngine
) -> None:
    await store.create_workflow(workflow_id="wf-l", tenant_id="t1")
    started = AppendRequest("wf-l", "t1", [new("WORKFLOW_STARTED")])
    finished = AppendRequest(
        "wf-l", "t1", [new("WORKFLOW_COMPLETED", {"result": "done"}), new("STREAM_END")]
    )
    outcomes = await store.append_many(
        [request("wf-l", 1), started, request("wf-l", 2), finished, request("wf-l", 1)]
    )
    assert [ok(outcome) for outcome in outcomes[:4]] == [[1], [2], [3, 4], [5, 6]]
    assert isinstance(outcomes[4], FailedPrecondition)  # after STREAM_END
    record = await store.get_workflow("wf-l", "t1")
    assert (record.status, record.result, record.last_seq) == ("COMPLETED", "done", 6)
    assert await stored_seqs(engine, "wf-l") == [1, 2, 3, 4, 5, 6]


async def test_a_refused_batch_leaves_the_rest_of_its_group_committed(
    store: SqlEventStore, engine: AsyncEngine
) -> None:
    await store.create_workflow(workflow_id="wf-ok", tenant_id="t1")
    await store.create_workflow(workflow_id="wf-done", tenant_id="t1")
    await store.create_workflow(workflow_id="wf-theirs", tenant_id="t2")
    await store.append("wf-done", "t1", [new("WORKFLOW_COMPLETED"), new("STREAM_END")])
    outcomes = await store.append_many(
        [
            request("wf-ok", 2),
            request("wf-missing", 1),
            request("wf-done", 1),
            request("wf-theirs", 1),
            request("wf-ok", 1),
        ]
    )
    assert ok(outcomes[0]) == [1, 2]
    assert isinstance(outcomes[1], NotFound)
    assert isinstance(outcomes[2], FailedPrecondition)
    assert isinstance(outcomes[3], NotFound)  # another tenant's workflow looks missing
    assert ok(outcomes[4]) == [3]
    assert await stored_seqs(engine, "wf-ok") == [1, 2, 3]
    assert (await store.get_workflow("wf-done", "t1")).last_seq == 2
    assert (await store.get_workflow("wf-theirs", "t2")).last_seq == 0


async def test_a_retry_inside_a_group_gets_its_first_seqs_and_the_others_commit_once(
    store: SqlEventStore, engine: AsyncEngine
) -> None:
    await store.create_workflow(workflow_id="wf-r", tenant_id="t1")
    await store.create_workflow(workflow_id="wf-s", tenant_id="t1")
    first = await store.append("wf-r", "t1", progress(2), producer_id="p", batch_seq=1)
    outcomes = await store.append_many(
        [
            request("wf-s", 2, "q", 1),
            request("wf-r", 2, "p", 1),  # the retry: fails the group's insert into `appends`
            request("wf-r", 1, "p", 2),
            request("wf-s", 1, "q", 1),  # the same batch twice in one group
        ]
    )
    assert ok(outcomes[0]) == [1, 2]
    assert isinstance(outcomes[1], Appended) and outcomes[1].repeated
    assert outcomes[1].seqs == first.seqs == [1, 2]
    assert ok(outcomes[2]) == [3]
    # The fourth names (q, 1) again with another size: refused, nothing stored twice.
    assert not isinstance(outcomes[3], Appended)
    assert await stored_seqs(engine, "wf-r") == [1, 2, 3]
    assert await stored_seqs(engine, "wf-s") == [1, 2]
    assert (await store.get_workflow("wf-r", "t1")).last_seq == 3
    assert (await store.get_workflow("wf-s", "t1")).last_seq == 2
    async with engine.connect() as conn:
        recorded = (await conn.execute(select(func.count()).select_from(appends))).scalar_one()
    assert recorded == 3


async def test_concurrent_appends_to_the_log_share_a_commit(
    engine: AsyncEngine, store: SqlEventStore, hot: MemoryHotTier
) -> None:
    log = EventLog(store, hot)
    ids = [f"wf-{n}" for n in range(5)]
    for workflow_id in ids:
        await store.create_workflow(workflow_id=workflow_id, tenant_id="t1")
    commits = count_commits(store)
    results = await asyncio.gather(
        *(log.append(workflow_id, "t1", progress(1)) for _ in range(10) for workflow_id in ids)
    )
    # Every append was queued before the writers ran: a commit per lane, not per append.
    assert len(commits) <= WRITER_LANES
    for position, workflow_id in enumerate(ids):
        mine = [seq for i, result in enumerate(results) if i % 5 == position for seq in result]
        assert sorted(mine) == list(range(1, 11))
        assert await stored_seqs(engine, workflow_id) == list(range(1, 11))
        # Published in seq order, each event once.
        window = await hot.read(workflow_id, 1, 100)
        assert [event.seq for event in window.events] == list(range(1, 11))


async def test_an_append_whose_caller_gave_up_is_committed_and_published(
    engine: AsyncEngine, store: SqlEventStore, hot: MemoryHotTier
) -> None:
    log = EventLog(store, hot)
    await store.create_workflow(workflow_id="wf-c", tenant_id="t1")
    given_up = asyncio.create_task(log.append("wf-c", "t1", progress(2)))
    await asyncio.sleep(0)  # queued, not yet committed
    given_up.cancel()
    after = await log.append("wf-c", "t1", progress(1))
    assert after == [3]
    assert await stored_seqs(engine, "wf-c") == [1, 2, 3]
    assert [event.seq for event in (await hot.read("wf-c", 1, 10)).events] == [1, 2, 3]


async def test_two_replicas_committing_groups_over_shared_workflows_stay_gap_free(
    store: SqlEventStore, engines: EngineMaker, engine: AsyncEngine
) -> None:
    """Groups lock workflow rows in id order, so overlapping groups of two replicas queue
    on each other instead of deadlocking."""
    other_engine = engines()
    try:
        other = SqlEventStore(other_engine)
        logs = [EventLog(store, MemoryHotTier()), EventLog(other, MemoryHotTier())]
        ids = ["wf-x", "wf-y", "wf-z"]
        for workflow_id in ids:
            await store.create_workflow(workflow_id=workflow_id, tenant_id="t1")
        await other.get_workflow("wf-x", "t1")  # both replicas connected: their groups overlap
        # Each replica queues its appends in the opposite workflow order.
        orders = [ids, list(reversed(ids))]
        await asyncio.gather(
            *(
                logs[side].append(workflow_id, "t1", progress(2))
                for _ in range(8)
                for side in (0, 1)
                for workflow_id in orders[side]
            )
        )
    finally:
        await other_engine.dispose()
    for workflow_id in ids:
        assert await stored_seqs(engine, workflow_id) == list(range(1, 33))


async def test_a_group_stops_at_its_event_bound_and_the_rest_commits_next(
    engine: AsyncEngine, store: SqlEventStore, hot: MemoryHotTier
) -> None:
    log = EventLog(store, hot)
    await store.create_workflow(workflow_id="wf-big", tenant_id="t1")
    commits = count_commits(store)
    per_batch = MAX_GROUP_EVENTS // 5
    appends = [log.append("wf-big", "t1", progress(per_batch)) for _ in range(6)]
    results = await asyncio.gather(*appends)
    assert len(commits) == 2  # five batches reach the bound; the sixth follows alone
    assert sorted(seq for result in results for seq in result) == list(range(1, 6 * per_batch + 1))
