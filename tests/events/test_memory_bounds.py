"""A real events process under a flood of large ephemeral events: its memory stays within
what its hot tier may hold, and no durable event is lost to the evictions."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
import redis

from shuttle.envelope import type_value
from shuttle.grpc_client import tenant_metadata
from shuttle.v1 import common_pb2, events_pb2, events_pb2_grpc
from tests.support.events_process import EventsProcess

from .helpers import draft

pytestmark = pytest.mark.integration

MIB = 1024 * 1024
HOT_MAX_BYTES = 64 * MIB
HOT_MAX_WORKFLOW_BYTES = 32 * MIB
# Besides what the hot tier holds, the process takes for each append about six passing
# copies of its 4 MiB event (gRPC's buffers, the request's bytes and message, its text, the
# parsed payload, the Redis command): about 24 MiB at the peak. The allocator keeps some
# freed blocks of that size: with a 1 MiB hot tier, 100 such appends left the process at
# most 52 MiB above its baseline, and with these bounds at most 80 MiB above the hot tier's
# bytes. Without the byte bounds, 200 such appends grow it by 800 MiB.
MARGIN = 112 * MIB
APPENDS = 200
DELTA_TEXT = "x" * (4 * MIB - 1024)  # the batch, with the event's other fields, under 4 MiB
TENANT = "t1"
METADATA = tenant_metadata(TENANT)


def memory(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM (the peak) of a process, in bytes."""
    values = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, rest = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            values[name] = int(rest.split()[0]) * 1024
    return values


@pytest.fixture(params=["memory", "redis"])
def hot_tier(request: pytest.FixtureRequest) -> dict[str, str]:
    variables = {
        "SHUTTLE_EVENTS_HOT_MAX_BYTES": str(HOT_MAX_BYTES),
        "SHUTTLE_EVENTS_HOT_MAX_WORKFLOW_BYTES": str(HOT_MAX_WORKFLOW_BYTES),
    }
    if request.param == "redis":
        variables["SHUTTLE_REDIS_URL"] = request.getfixturevalue("redis_server")
        variables["SHUTTLE_REDIS_KEY_PREFIX"] = request.getfixturevalue("redis_prefix")
    return variables


@pytest.fixture
def process(tmp_path: Path, hot_tier: dict[str, str]) -> Iterator[EventsProcess]:
    service = EventsProcess(tmp_path, hot_tier).start()
    yield service
    service.stop()


@pytest.fixture
def stub(process: EventsProcess) -> Iterator[events_pb2_grpc.EventServiceStub]:
    with grpc.insecure_channel(process.target) as channel:
        yield events_pb2_grpc.EventServiceStub(channel)


def create(stub: events_pb2_grpc.EventServiceStub) -> str:
    workflow = stub.CreateWorkflow(events_pb2.CreateWorkflowRequest(), metadata=METADATA)
    return str(workflow.workflow_id)


def append(
    stub: events_pb2_grpc.EventServiceStub, workflow_id: str, *drafts: common_pb2.EventDraft
) -> list[int]:
    request = events_pb2.AppendRequest(workflow_id=workflow_id, events=drafts)
    return list(stub.Append(request, metadata=METADATA, timeout=60).seqs)


def durable_replay(stub: events_pb2_grpc.EventServiceStub, workflow_id: str) -> list[int]:
    """The seqs of the log's durable events, replayed from the start to STREAM_END."""
    request = events_pb2.StreamRequest(
        workflow_id=workflow_id,
        from_seq=1,
        types=[type_value("PROGRESS"), type_value("WORKFLOW_COMPLETED")],
    )
    return [event.seq for event in stub.Stream(request, metadata=METADATA, timeout=120)]


@pytest.mark.parametrize("workflows", [1, 5])
def test_a_flood_of_large_ephemeral_events_stays_within_the_hot_tiers_bounds(
    process: EventsProcess,
    stub: events_pb2_grpc.EventServiceStub,
    hot_tier: dict[str, str],
    workflows: int,
) -> None:
    ids = [create(stub) for _ in range(workflows)]
    durable: dict[str, list[int]] = {workflow_id: [] for workflow_id in ids}
    # Warm up every path an append takes, with small events, before the baseline.
    for workflow_id in ids:
        durable[workflow_id] += append(stub, workflow_id, draft("PROGRESS", {"step": 0}))
        append(stub, workflow_id, draft("THREAD_MESSAGE_DELTA", {"delta": "warm"}))
    baseline = memory(process.pid)["VmRSS"]

    delta = common_pb2.EventDraft(
        type=type_value("THREAD_MESSAGE_DELTA"),
        agent_id="agent-main",
        payload_json=json.dumps({"delta": DELTA_TEXT}),
    )
    for index in range(APPENDS):
        workflow_id = ids[index % workflows]
        append(stub, workflow_id, delta)
        if index % 20 == 0:
            durable[workflow_id] += append(stub, workflow_id, draft("PROGRESS", {"step": index}))

    used = memory(process.pid)
    bound = baseline + HOT_MAX_BYTES + MARGIN
    assert used["VmRSS"] < bound, (used, baseline)
    assert used["VmHWM"] < bound, (used, baseline)  # the peak, not only the end
    for workflow_id in ids:
        (completed,) = append(stub, workflow_id, draft("WORKFLOW_COMPLETED", {"result": "ok"}))
        # Every durable event replayed, in order, from SQL where the hot tier let it go, and
        # the STREAM_END the log added.
        expected = [*durable[workflow_id], completed, completed + 1]
        assert durable_replay(stub, workflow_id) == expected
    if "SHUTTLE_REDIS_URL" in hot_tier:
        assert_streams_bounded(hot_tier, ids)


def assert_streams_bounded(hot_tier: dict[str, str], ids: list[str]) -> None:
    """Each workflow's Redis stream holds at most its byte bound, by the counts beside it."""
    client = redis.Redis.from_url(hot_tier["SHUTTLE_REDIS_URL"])
    try:
        for workflow_id in ids:
            key = f"{hot_tier['SHUTTLE_REDIS_KEY_PREFIX']}events:{{{workflow_id}}}"
            first, last = (int(client.lindex(f"{key}:bytes", i) or 0) for i in (0, -1))
            held = 0
            for _id, fields in client.xrange(key) or []:
                held += len((fields or {})[b"e"])
            assert held == last - first
            assert 0 < held <= HOT_MAX_WORKFLOW_BYTES
    finally:
        client.close()
