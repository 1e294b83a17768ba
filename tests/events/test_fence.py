"""The append fence: once a run is taken over, its old owner's batches (durable, ephemeral,
lifecycle) get no seq and store nothing, wherever seqs are assigned (SQLite and PostgreSQL)."""

from __future__ import annotations

import asyncio
import json

import pytest

from services.events.claims import claim_runs
from services.events.errors import EventsError, FailedPrecondition, Fenced
from services.events.records import Appended, AppendRequest, WorkflowStatus
from services.events.store import SqlEventStore
from tests.support.databases import EngineMaker

from .conftest import Clock, Replica
from .helpers import collect, new, progress, seqs
from .test_leases import TENANT

FENCED = (
    r"^fenced: workflow 'wf-1' is leased at epoch 2 \(to 'exec-b'\), "
    "this batch carries lease epoch 1"
)


async def taken_over(one: Replica, clock: Clock, workflow_id: str = "wf-1") -> str:
    """A run created leased to exec-a (epoch 1) with two events, then claimed by exec-b."""
    await one.log.create_workflow(
        tenant_id=TENANT, workflow_id=workflow_id, lease_owner="exec-a", lease_ttl_ms=1000
    )
    appended = await one.log.append(
        workflow_id, TENANT, [new("WORKFLOW_STARTED"), *progress(1)], lease_epoch=1
    )
    assert appended == [1, 2]
    clock.advance(2)
    (claimed,) = await claim_runs(one.leases, "exec-b", 60_000, 1)
    assert (claimed.workflow_id, claimed.lease_epoch) == (workflow_id, 2)
    return workflow_id


async def test_the_old_owners_batches_are_refused_and_store_nothing(
    one: Replica, clock: Clock
) -> None:
    workflow_id = await taken_over(one, clock)
    stale = [
        progress(2),  # durable
        [new("THREAD_MESSAGE_DELTA", {"delta": "x", "index": 0})],  # ephemeral only
        [new("LLM_PARTIAL"), new("PROGRESS")],  # mixed
        [new("WORKFLOW_COMPLETED", {"result": "stale"})],  # lifecycle: would end the run
        [new("ERROR_OCCURRED", {"fatal": True, "error_message": "stale"})],
    ]
    for batch in stale:
        with pytest.raises(Fenced, match=FENCED):
            await one.log.append(workflow_id, TENANT, batch, lease_epoch=1)
    with pytest.raises(Fenced, match="this batch carries lease epoch 3"):
        await one.log.append(workflow_id, TENANT, progress(1), lease_epoch=3)

    record = await one.log.get_workflow(workflow_id, TENANT)
    assert (record.last_seq, record.status, record.result) == (2, WorkflowStatus.RUNNING, "")
    # The new owner goes on from seq 3; commands (no epoch) are not fenced.
    assert await one.log.append(workflow_id, TENANT, progress(1), lease_epoch=2) == [3]
    assert await one.log.append(workflow_id, TENANT, [new("WORKFLOW_PAUSING")]) == [4]
    await one.log.append(workflow_id, TENANT, [new("WORKFLOW_COMPLETED")], lease_epoch=2)
    events = await collect(one.log.stream(workflow_id, TENANT))
    assert seqs(events) == [1, 2, 3, 4, 5, 6]
    assert [e.type for e in events][-2:] == ["WORKFLOW_COMPLETED", "STREAM_END"]
    assert "stale" not in json.dumps([e.payload_json for e in events])
    # After the end the old owner is still told it was fenced, not that the log ended.
    with pytest.raises(Fenced):
        await one.log.append(workflow_id, TENANT, progress(1), lease_epoch=1)
    with pytest.raises(FailedPrecondition, match="has ended"):
        await one.log.append(workflow_id, TENANT, progress(1), lease_epoch=2)


async def test_a_repeat_of_a_batch_stored_before_the_fence_still_gets_its_seqs(
    one: Replica, clock: Clock
) -> None:
    await one.log.create_workflow(
        tenant_id=TENANT, workflow_id="wf-1", lease_owner="exec-a", lease_ttl_ms=1000
    )
    first = await one.log.append(
        "wf-1", TENANT, progress(3), producer_id="run-a", batch_seq=1, lease_epoch=1
    )
    clock.advance(2)
    await claim_runs(one.leases, "exec-b", 60_000, 1)
    # Its answer was lost and exec-a resends it: the seqs it already has, nothing stored.
    again = await one.log.append(
        "wf-1", TENANT, progress(3), producer_id="run-a", batch_seq=1, lease_epoch=1
    )
    assert again == first == [1, 2, 3]
    with pytest.raises(Fenced):
        await one.log.append(
            "wf-1", TENANT, progress(1), producer_id="run-a", batch_seq=2, lease_epoch=1
        )
    assert (await one.log.get_workflow("wf-1", TENANT)).last_seq == 3


async def test_fenced_batches_in_one_group_commit_leave_the_others_gap_free(
    one: Replica, clock: Clock, engines: EngineMaker
) -> None:
    await taken_over(one, clock, "wf-1")
    await one.log.create_workflow(tenant_id=TENANT, workflow_id="wf-2")
    # One transaction, as a group commit makes it: batches of both epochs interleaved.
    store = SqlEventStore(engines(), clock=clock)
    requests = [
        AppendRequest("wf-1", TENANT, progress(2), lease_epoch=epoch) for epoch in (2, 1, 2, 1)
    ]
    requests.insert(2, AppendRequest("wf-2", TENANT, progress(1)))
    outcomes = await store.append_many(requests)
    await store.close()
    assert [type(outcome) for outcome in outcomes] == [
        Appended,
        Fenced,
        Appended,
        Appended,
        Fenced,
    ]
    assert [o.seqs for o in outcomes if isinstance(o, Appended)] == [[3, 4], [1], [5, 6]]

    # Concurrent appends, which the log's group committer gathers into shared transactions.
    async def attempt(epoch: int) -> list[int] | EventsError:
        try:
            return await one.log.append("wf-1", TENANT, progress(2), lease_epoch=epoch)
        except EventsError as refused:
            return refused

    answers = await asyncio.gather(*(attempt(2 if n % 3 else 1) for n in range(24)))
    stored = sorted(seq for answer in answers if isinstance(answer, list) for seq in answer)
    assert stored == list(range(7, 7 + 2 * 16))
    assert sum(isinstance(answer, Fenced) for answer in answers) == 8
    page = await one.log.list_events("wf-1", TENANT, limit=1000)
    assert seqs(page.events) == list(range(1, 7 + 2 * 16))
