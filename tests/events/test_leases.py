"""Run leases and the sweeper that ends runs no executor took over (SQLite and PostgreSQL)."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta

import grpc
import pytest

from services.events.claims import claim_runs
from services.events.errors import FailedPrecondition, Fenced, InvalidArgument, NotFound
from services.events.records import WorkflowStatus
from shuttle.grpc_client import tenant_metadata
from shuttle.settings import SettingsError, load_settings
from shuttle.v1 import events_pb2, events_pb2_grpc
from tests.support.databases import EngineMaker

from .conftest import ORPHAN_SECONDS, START, Clock, Replica, replica
from .helpers import collect, new, progress, seqs

TENANT = "acme"


async def running(one: Replica, workflow_id: str = "wf-1") -> str:
    await one.log.create_workflow(tenant_id=TENANT, workflow_id=workflow_id)
    await one.log.append(workflow_id, TENANT, [new("WORKFLOW_STARTED"), *progress(2)])
    return workflow_id


async def test_a_lease_is_taken_extended_and_refused_to_others_while_live(
    one: Replica, clock: Clock
) -> None:
    workflow_id = await running(one)
    first = await one.leases.renew(workflow_id, TENANT, "exec-a", 2000)
    assert first.lease_owner == "exec-a"
    assert first.lease_expires_at == START + timedelta(seconds=2)

    clock.advance(1)
    extended = await one.leases.renew(workflow_id, TENANT, "exec-a", 2000)
    assert extended.lease_expires_at == START + timedelta(seconds=3)

    with pytest.raises(FailedPrecondition, match=r"leased to 'exec-a'.*not to 'exec-b'"):
        await one.leases.renew(workflow_id, TENANT, "exec-b", 2000)

    clock.advance(2.5)  # exec-a's lease lapsed: whoever renews first takes it
    taken = await one.leases.renew(workflow_id, TENANT, "exec-b", 2000)
    assert taken.lease_owner == "exec-b"
    assert (await one.log.get_workflow(workflow_id, TENANT)).lease_owner == "exec-b"


async def test_renewal_is_refused_once_the_workflow_has_ended(one: Replica) -> None:
    workflow_id = await running(one)
    await one.leases.renew(workflow_id, TENANT, "exec-a", 2000)
    await one.log.append(workflow_id, TENANT, [new("WORKFLOW_COMPLETED", {"result": "ok"})])

    ended = await one.log.get_workflow(workflow_id, TENANT)
    assert (ended.lease_owner, ended.lease_expires_at) == ("exec-a", None)
    with pytest.raises(FailedPrecondition, match=r"has ended \(COMPLETED\).*stop the run"):
        await one.leases.renew(workflow_id, TENANT, "exec-a", 2000)


async def test_bad_renewals_are_refused_clearly(one: Replica) -> None:
    workflow_id = await running(one)
    with pytest.raises(NotFound):
        await one.leases.renew(workflow_id, "globex", "exec-a", 2000)
    with pytest.raises(InvalidArgument, match=r"ttl_ms must be 1 to 3600000 \(got 0\)"):
        await one.leases.renew(workflow_id, TENANT, "exec-a", 0)
    with pytest.raises(InvalidArgument, match="owner is required"):
        await one.leases.renew(workflow_id, TENANT, "", 2000)
    assert (await one.log.get_workflow(workflow_id, TENANT)).lease_owner == ""


async def test_a_run_no_executor_takes_over_is_ended_as_executor_lost_for_live_subscribers(
    one: Replica, clock: Clock
) -> None:
    workflow_id = await running(one)
    await one.leases.renew(workflow_id, TENANT, "exec-a", 2000)
    watcher = asyncio.create_task(collect(one.log.stream(workflow_id, TENANT)))
    clock.advance(1)
    assert await one.sweeper.sweep_once() == []  # still alive

    clock.advance(1.5)
    assert await one.sweeper.sweep_once() == []  # lapsed: another executor may take it over
    clock.advance(ORPHAN_SECONDS - 0.5)
    assert await one.sweeper.sweep_once() == []
    clock.advance(0.1)  # nobody did within the orphan time
    assert await one.sweeper.sweep_once() == [workflow_id]

    events = await asyncio.wait_for(watcher, 30)
    assert [e.type for e in events][-2:] == ["ERROR_OCCURRED", "STREAM_END"]
    assert seqs(events) == list(range(1, len(events) + 1))
    payload = json.loads(events[-2].payload_json)
    assert payload["error_type"] == "EXECUTOR_LOST"
    assert (payload["fatal"], payload["recoverable"]) == (True, False)
    assert payload["lost_owner"] == "exec-a"
    assert "exec-a" in payload["error_message"]
    assert "no executor took the run over within 10 s" in payload["error_message"]
    assert "Retry the task" in payload["error_message"]
    assert payload["orphan_seconds"] == ORPHAN_SECONDS
    record = await one.log.get_workflow(workflow_id, TENANT)
    assert record.status == WorkflowStatus.FAILED
    assert "stopped responding" in record.error
    assert await one.sweeper.sweep_once() == []  # ended once


async def test_the_old_owner_learns_its_run_was_ended(one: Replica, clock: Clock) -> None:
    workflow_id = await running(one)
    leased = await one.leases.renew(workflow_id, TENANT, "exec-a", 2000)
    clock.advance(3)
    assert await one.sweeper.orphans() == []  # lapsed, but not for the orphan time yet
    clock.advance(ORPHAN_SECONDS)
    orphans = await one.sweeper.orphans()
    assert [lease.workflow_id for lease in orphans] == [workflow_id]
    assert orphans[0].epoch == leased.lease_epoch == 1
    assert await one.sweeper.claim(orphans[0])
    # Claimed but not yet ended: the slow executor may not take its lease back, nor another
    # executor claim the run, and its appends at its old epoch are fenced.
    with pytest.raises(FailedPrecondition, match=r"'exec-a'.*EXECUTOR_LOST: stop the run"):
        await one.leases.renew(workflow_id, TENANT, "exec-a", 2000)
    with pytest.raises(FailedPrecondition, match=r"'exec-a'.*EXECUTOR_LOST: stop the run"):
        await one.leases.renew(workflow_id, TENANT, "exec-a", 2000, epoch=1)
    assert await claim_runs(one.leases, "exec-b", 60_000, 10) == []
    with pytest.raises(Fenced, match=r"^fenced: .* epoch 2 .* lease epoch 1"):
        await one.log.append(workflow_id, TENANT, progress(1), lease_epoch=1)

    clock.advance(30)  # the claiming replica died; another one finishes the job
    assert await one.sweeper.sweep_once() == [workflow_id]
    last_seq = (await one.log.get_workflow(workflow_id, TENANT)).last_seq
    with pytest.raises(FailedPrecondition, match=r"has ended.*nothing more can be appended"):
        await one.log.append(workflow_id, TENANT, progress(1), producer_id="exec-a", batch_seq=9)
    with pytest.raises(FailedPrecondition, match=r"has ended \(FAILED\)"):
        await one.leases.renew(workflow_id, TENANT, "exec-a", 2000)
    events = await one.log.list_events(workflow_id, TENANT, limit=1000)
    assert seqs(events.events) == list(range(1, last_seq + 1))
    lost = [e for e in events.events if e.type == "ERROR_OCCURRED"]
    assert len(lost) == 1 and json.loads(lost[0].payload_json)["lost_owner"] == "exec-a"


async def test_workflows_never_leased_or_renewed_in_time_are_left_alone(
    one: Replica, clock: Clock
) -> None:
    never = await running(one, "wf-never")
    alive = await running(one, "wf-alive")
    await one.leases.renew(alive, TENANT, "exec-a", 2000)
    for _ in range(5):
        clock.advance(1.5)
        await one.leases.renew(alive, TENANT, "exec-a", 2000)
        assert await one.sweeper.sweep_once() == []
    for workflow_id in (never, alive):
        record = await one.log.get_workflow(workflow_id, TENANT)
        assert record.status == WorkflowStatus.RUNNING and not record.stream_ended


async def test_two_replicas_sweeping_at_once_end_the_run_once(
    engines: EngineMaker, clock: Clock
) -> None:
    a, b = replica(engines, clock), replica(engines, clock)
    workflow_ids = [await running(a, f"wf-{n}") for n in range(4)]
    for workflow_id in workflow_ids:
        await a.leases.renew(workflow_id, TENANT, "exec-a", 2000)
    clock.advance(5 + ORPHAN_SECONDS)

    ended_a, ended_b = await asyncio.gather(a.sweeper.sweep_once(), b.sweeper.sweep_once())

    assert sorted(ended_a + ended_b) == workflow_ids
    for workflow_id in workflow_ids:
        page = await b.log.list_events(workflow_id, TENANT, limit=1000)
        types = [e.type for e in page.events]
        assert types.count("ERROR_OCCURRED") == 1 and types[-1] == "STREAM_END"
        assert seqs(page.events) == list(range(1, len(types) + 1))


async def test_renew_lease_over_grpc(stub: events_pb2_grpc.EventServiceAsyncStub) -> None:
    workflow = await stub.CreateWorkflow(
        events_pb2.CreateWorkflowRequest(tenant_id=TENANT), metadata=tenant_metadata(TENANT)
    )
    request = events_pb2.RenewLeaseRequest(
        workflow_id=workflow.workflow_id, owner="exec-a", ttl_ms=60_000
    )
    leased = await stub.RenewLease(request, metadata=tenant_metadata(TENANT))
    assert leased.lease_owner == "exec-a"
    assert leased.lease_expires_at.ToDatetime(tzinfo=UTC) > datetime.now(UTC)

    refusals = [
        (TENANT, "exec-b", 60_000, grpc.StatusCode.FAILED_PRECONDITION, "leased to 'exec-a'"),
        ("globex", "exec-a", 60_000, grpc.StatusCode.NOT_FOUND, "not found"),
        (TENANT, "exec-a", 0, grpc.StatusCode.INVALID_ARGUMENT, "ttl_ms"),
    ]
    for tenant, owner, ttl_ms, code, words in refusals:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.RenewLease(
                events_pb2.RenewLeaseRequest(
                    workflow_id=workflow.workflow_id, owner=owner, ttl_ms=ttl_ms
                ),
                metadata=tenant_metadata(tenant),
            )
        assert caught.value.code() == code
        assert words in (caught.value.details() or "")


def test_the_orphan_time_is_a_setting_of_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SHUTTLE_EVENTS_ORPHAN_SECONDS", raising=False)
    assert load_settings().events_orphan_seconds == 120.0
    monkeypatch.setenv("SHUTTLE_EVENTS_ORPHAN_SECONDS", "2.5")
    assert load_settings().events_orphan_seconds == 2.5
    monkeypatch.setenv("SHUTTLE_EVENTS_ORPHAN_SECONDS", "0")
    with pytest.raises(SettingsError, match="SHUTTLE_EVENTS_ORPHAN_SECONDS"):
        load_settings()
