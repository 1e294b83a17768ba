"""Lease epochs, takeovers and hand-overs: a run created leased, renewed at its epoch, claimed
by another executor once its lease lapsed or was released (SQLite and PostgreSQL)."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta

import pytest

from services.events.claims import claim_runs
from services.events.errors import FailedPrecondition, InvalidArgument
from services.events.records import WorkflowStatus

from .conftest import ORPHAN_SECONDS, START, Clock, Replica
from .helpers import new, progress
from .test_leases import TENANT, running

SPEC = json.dumps({"mode": "STANDARD", "model": "m", "history": [{"role": "user"}]})


async def leased(one: Replica, workflow_id: str, owner: str = "exec-a", ttl_ms: int = 2000) -> str:
    await one.log.create_workflow(
        tenant_id=TENANT,
        workflow_id=workflow_id,
        query="q",
        spec_json=SPEC,
        lease_owner=owner,
        lease_ttl_ms=ttl_ms,
    )
    await one.log.append(workflow_id, TENANT, [new("WORKFLOW_STARTED")], lease_epoch=1)
    return workflow_id


async def test_a_workflow_created_leased_is_its_creators_at_epoch_1(one: Replica) -> None:
    created = await one.log.create_workflow(
        tenant_id=TENANT,
        workflow_id="wf-1",
        spec_json=SPEC,
        lease_owner="exec-a",
        lease_ttl_ms=2000,
    )
    stored = await one.log.get_workflow("wf-1", TENANT, with_spec=True)
    for record in (created, stored):
        assert (record.lease_owner, record.lease_epoch, record.takeovers) == ("exec-a", 1, 0)
        assert record.lease_expires_at == START + timedelta(seconds=2)
    # The spec (megabytes, at times) is read only where it is answered.
    assert (created.spec_json, stored.spec_json) == ("", SPEC)
    assert (await one.log.get_workflow("wf-1", TENANT)).spec_json == ""
    plain = await one.log.create_workflow(tenant_id=TENANT, workflow_id="wf-2")
    assert (plain.lease_owner, plain.lease_epoch, plain.spec_json) == ("", 0, "")
    assert (await one.log.get_workflow("wf-2", TENANT)).lease_expires_at is None
    # Nobody may claim a run between its creation and its creator's first renewal.
    assert await claim_runs(one.leases, "exec-b", 2000, 10) == []


async def test_bad_creations_are_refused_clearly(one: Replica) -> None:
    refusals = [
        ({"spec_json": "[1]"}, "spec_json must be a JSON object, not an array"),
        ({"spec_json": "{"}, "spec_json is not valid JSON"),
        ({"lease_owner": "exec a", "lease_ttl_ms": 10}, "lease_owner 'exec a' is not a valid id"),
        ({"lease_owner": "exec-a"}, r"lease_ttl_ms must be 1 to 3600000 \(got 0\)"),
        ({"lease_ttl_ms": 10}, "lease_ttl_ms is set but lease_owner is empty"),
    ]
    for fields, words in refusals:
        with pytest.raises(InvalidArgument, match=words):
            await one.log.create_workflow(tenant_id=TENANT, workflow_id="wf-1", **fields)  # type: ignore[arg-type]


async def test_a_renewal_at_an_epoch_holds_only_while_owner_and_epoch_do(
    one: Replica, clock: Clock
) -> None:
    workflow_id = await leased(one, "wf-1")
    clock.advance(1)
    renewed = await one.leases.renew(workflow_id, TENANT, "exec-a", 2000, epoch=1)
    assert (renewed.lease_epoch, renewed.lease_expires_at) == (1, START + timedelta(seconds=3))
    with pytest.raises(FailedPrecondition, match=r"at epoch 1 \(owner 'exec-a'\), not at epoch 2"):
        await one.leases.renew(workflow_id, TENANT, "exec-a", 2000, epoch=2)
    with pytest.raises(FailedPrecondition, match=r"leased to 'exec-a'.*not to 'exec-b'"):
        await one.leases.renew(workflow_id, TENANT, "exec-b", 2000, epoch=1)
    clock.advance(5)  # lapsed but not claimed: its owner may still take it back
    again = await one.leases.renew(workflow_id, TENANT, "exec-a", 2000, epoch=1)
    assert again.lease_expires_at == clock.now + timedelta(seconds=2)

    clock.advance(5)
    (claimed,) = await claim_runs(one.leases, "exec-b", 2000, 10)
    assert claimed.lease_epoch == 2
    with pytest.raises(FailedPrecondition, match=r"at epoch 2 \(owner 'exec-b'\).*taken over"):
        await one.leases.renew(workflow_id, TENANT, "exec-a", 2000, epoch=1)
    await one.log.append(workflow_id, TENANT, [new("WORKFLOW_COMPLETED")], lease_epoch=2)
    with pytest.raises(FailedPrecondition, match=r"has ended \(COMPLETED\)"):
        await one.leases.renew(workflow_id, TENANT, "exec-b", 2000, epoch=2)


async def test_a_renewal_without_an_epoch_moves_it_on_for_a_new_owner(
    one: Replica, clock: Clock
) -> None:
    workflow_id = await running(one)
    first = await one.leases.renew(workflow_id, TENANT, "exec-a", 2000)
    assert first.lease_epoch == 1
    assert (await one.leases.renew(workflow_id, TENANT, "exec-a", 2000)).lease_epoch == 1
    clock.advance(3)
    taken = await one.leases.renew(workflow_id, TENANT, "exec-b", 2000)
    assert (taken.lease_owner, taken.lease_epoch, taken.takeovers) == ("exec-b", 2, 0)


async def test_a_lapsed_run_is_claimed_at_the_next_epoch_with_its_spec(
    one: Replica, clock: Clock
) -> None:
    old = await leased(one, "wf-old", ttl_ms=1000)
    young = await leased(one, "wf-young", ttl_ms=2000)
    alive = await leased(one, "wf-alive", ttl_ms=60_000)
    await running(one, "wf-never-leased")
    ended = await leased(one, "wf-ended", ttl_ms=1000)
    await one.log.append(ended, TENANT, [new("WORKFLOW_COMPLETED")])
    assert await claim_runs(one.leases, "exec-b", 5000, 10) == []  # none lapsed yet

    clock.advance(3)
    (first,) = await claim_runs(one.leases, "exec-b", 5000, 1)  # oldest expiry first
    assert first.workflow_id == old
    assert (first.lease_owner, first.lease_epoch, first.takeovers) == ("exec-b", 2, 1)
    assert first.lease_expires_at == clock.now + timedelta(seconds=5)
    assert (first.spec_json, first.query, first.tenant_id) == (SPEC, "q", TENANT)
    assert first.status == WorkflowStatus.RUNNING
    claimed = await claim_runs(one.leases, "exec-c", 5000, 10)
    assert [record.workflow_id for record in claimed] == [young]
    assert await claim_runs(one.leases, "exec-c", 5000, 10) == []
    assert (await one.log.get_workflow(alive, TENANT)).lease_epoch == 1

    clock.advance(10)  # exec-b died too: the run is taken over again
    again = {r.workflow_id: r for r in await claim_runs(one.leases, "exec-d", 5000, 10)}
    assert set(again) == {old, young}
    assert (again[old].lease_epoch, again[old].takeovers) == (3, 2)


async def test_bad_claims_are_refused_clearly(one: Replica) -> None:
    refusals = [
        ("", 1000, 1, "owner is required"),
        ("exec-a", 0, 1, r"ttl_ms must be 1 to 3600000 \(got 0\)"),
        ("exec-a", 1000, 0, r"limit must be 1 to 100 \(got 0\)"),
        ("exec-a", 1000, 101, r"limit must be 1 to 100 \(got 101\)"),
    ]
    for owner, ttl_ms, limit, words in refusals:
        with pytest.raises(InvalidArgument, match=words):
            await claim_runs(one.leases, owner, ttl_ms, limit)


async def test_a_released_run_is_claimable_at_once_and_not_counted_as_a_takeover(
    one: Replica, clock: Clock
) -> None:
    workflow_id = await leased(one, "wf-1", ttl_ms=60_000)
    with pytest.raises(FailedPrecondition, match=r"at epoch 1.*not at epoch 7"):
        await one.leases.release(workflow_id, TENANT, "exec-a", 7)
    with pytest.raises(FailedPrecondition, match="leased to 'exec-a'"):
        await one.leases.release(workflow_id, TENANT, "exec-b", 1)
    with pytest.raises(InvalidArgument, match="epoch is required"):
        await one.leases.release(workflow_id, TENANT, "exec-a", 0)

    released = await one.leases.release(workflow_id, TENANT, "exec-a", 1)
    assert (released.lease_owner, released.lease_epoch) == ("", 1)
    assert released.lease_expires_at == START
    clock.advance(0.5)
    assert await one.leases.release(workflow_id, TENANT, "exec-a", 1) == released  # a retry
    with pytest.raises(FailedPrecondition, match="was released"):
        await one.leases.renew(workflow_id, TENANT, "exec-a", 2000, epoch=1)

    (claimed,) = await claim_runs(one.leases, "exec-b", 2000, 10)
    assert (claimed.lease_owner, claimed.lease_epoch, claimed.takeovers) == ("exec-b", 2, 0)
    with pytest.raises(FailedPrecondition, match="at epoch 2"):
        await one.leases.release(workflow_id, TENANT, "exec-a", 1)


async def test_a_released_run_nobody_claims_is_ended_after_the_orphan_time(
    one: Replica, clock: Clock
) -> None:
    workflow_id = await leased(one, "wf-1", ttl_ms=60_000)
    await one.leases.release(workflow_id, TENANT, "exec-a", 1)
    clock.advance(ORPHAN_SECONDS - 1)
    assert await one.sweeper.sweep_once() == []
    clock.advance(2)
    assert await one.sweeper.sweep_once() == [workflow_id]
    record = await one.log.get_workflow(workflow_id, TENANT)
    assert record.status == WorkflowStatus.FAILED and record.stream_ended
    assert "handed it over" in record.error and "no executor took the run over" in record.error
    assert record.lease_epoch == 2  # the sweeper's claim fenced the run


async def test_a_run_claimed_in_time_is_not_swept(one: Replica, clock: Clock) -> None:
    workflow_id = await leased(one, "wf-1")
    clock.advance(ORPHAN_SECONDS - 1)
    await claim_runs(one.leases, "exec-b", 2000, 10)
    clock.advance(1.5)  # past the first lease's orphan time, within the new lease
    assert await one.sweeper.sweep_once() == []
    seqs = await one.log.append(workflow_id, TENANT, progress(1), lease_epoch=2)
    assert seqs == [2]


async def test_concurrent_claims_take_each_run_once(one: Replica, clock: Clock) -> None:
    workflow_ids = [await leased(one, f"wf-{n:02}", ttl_ms=1000 + n) for n in range(30)]
    clock.advance(5)

    async def claimer(name: str) -> list[str]:
        got: list[str] = []
        while claimed := await claim_runs(one.leases, name, 60_000, 3):
            got += [record.workflow_id for record in claimed]
        return got

    claims = await asyncio.gather(*(claimer(f"exec-{n}") for n in range(8)))
    leftover = [r.workflow_id for r in await claim_runs(one.leases, "exec-last", 60_000, 100)]
    everything = [workflow_id for got in claims for workflow_id in got] + leftover
    assert sorted(everything) == workflow_ids
    owners = {name: got for name, got in zip(range(8), claims, strict=True)}
    for name, got in owners.items():
        for workflow_id in got:
            record = await one.log.get_workflow(workflow_id, TENANT)
            assert (record.lease_owner, record.lease_epoch) == (f"exec-{name}", 2)
