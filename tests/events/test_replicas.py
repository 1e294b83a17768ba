"""Real events-service processes on one PostgreSQL and one Redis: replicas, kill -9."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import uuid
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from shuttle.grpc_client import tenant_metadata
from shuttle.v1 import common_pb2, events_pb2, events_pb2_grpc
from tests.support.databases import free_port

from .helpers import draft

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
TENANT = tenant_metadata("t1")


class EventsProcess:
    """`python -m services.events` with the given settings on a fixed free port."""

    def __init__(self, env: dict[str, str], tmp_path: Path) -> None:
        self.port = free_port()
        self.env = {
            **os.environ,
            **env,
            "SHUTTLE_EVENTS_PORT": str(self.port),
            "SHUTTLE_DATA_DIR": str(tmp_path / "var"),
            "SHUTTLE_LOG_FORMAT": "text",
        }
        self.process: asyncio.subprocess.Process | None = None

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def start(self) -> None:
        self.process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "services.events", cwd=REPO, env=self.env
        )
        # A connection made while the new process is still binding can be reset (seen after a
        # kill -9 on a loaded machine): ask again until it answers, within one deadline.
        deadline = asyncio.get_running_loop().time() + 60
        async with grpc.aio.insecure_channel(self.target) as channel:
            while True:
                try:
                    await health_pb2_grpc.HealthStub(channel).Check(
                        health_pb2.HealthCheckRequest(service="shuttle.v1.EventService"),
                        wait_for_ready=True,
                        timeout=max(deadline - asyncio.get_running_loop().time(), 0.1),
                    )
                    return
                except grpc.aio.AioRpcError as exc:
                    late = asyncio.get_running_loop().time() >= deadline
                    if exc.code() != grpc.StatusCode.UNAVAILABLE or late:
                        raise
                    await asyncio.sleep(0.1)

    async def kill(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        await self.process.wait()

    async def stop(self) -> None:
        if self.process is not None and self.process.returncode is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(self.process.wait(), 15)
            except TimeoutError:
                self.process.kill()
                await self.process.wait()


@pytest.fixture
def shared_env(postgres_url: str, redis_server: str, redis_prefix: str) -> dict[str, str]:
    return {
        "SHUTTLE_DATABASE_URL": postgres_url,
        "SHUTTLE_REDIS_URL": redis_server,
        "SHUTTLE_REDIS_KEY_PREFIX": redis_prefix,
        "SHUTTLE_EVENTS_POLL_SECONDS": "0.5",
    }


async def read_until_end(stream: grpc.aio.UnaryStreamCall) -> list[common_pb2.Event]:  # type: ignore[type-arg]
    return [event async for event in stream]


async def test_subscriber_on_one_replica_writers_on_the_other(
    shared_env: dict[str, str], tmp_path: Path
) -> None:
    replicas = [
        EventsProcess(shared_env, tmp_path / "a"),
        EventsProcess(shared_env, tmp_path / "b"),
    ]
    await asyncio.gather(*(replica.start() for replica in replicas))  # both migrate at once
    try:
        async with (
            grpc.aio.insecure_channel(replicas[0].target) as reader_channel,
            grpc.aio.insecure_channel(replicas[1].target) as writer_channel,
        ):
            reader = events_pb2_grpc.EventServiceStub(reader_channel)
            writer = events_pb2_grpc.EventServiceStub(writer_channel)
            workflow_id = f"wf-{uuid.uuid4()}"
            await writer.CreateWorkflow(
                events_pb2.CreateWorkflowRequest(workflow_id=workflow_id), metadata=TENANT
            )
            stream = reader.Stream(
                events_pb2.StreamRequest(workflow_id=workflow_id, from_seq=1), metadata=TENANT
            )
            subscription = asyncio.create_task(read_until_end(stream))

            async def producer(index: int) -> None:
                for batch in range(10):
                    kinds = ["PROGRESS", "THREAD_MESSAGE_DELTA"] if batch % 2 else ["PROGRESS"]
                    await writer.Append(
                        events_pb2.AppendRequest(
                            workflow_id=workflow_id,
                            events=[draft(kind, {"p": index}) for kind in kinds],
                            producer_id=f"p{index}",
                            batch_seq=batch + 1,
                        ),
                        metadata=TENANT,
                    )

            await asyncio.gather(*(producer(i) for i in range(10)))
            total = 10 * (5 * 1 + 5 * 2)
            await writer.Append(
                events_pb2.AppendRequest(
                    workflow_id=workflow_id, events=[draft("WORKFLOW_COMPLETED")]
                ),
                metadata=TENANT,
            )
            events = await asyncio.wait_for(subscription, 60)
    finally:
        await asyncio.gather(*(replica.stop() for replica in replicas))
    assert [e.seq for e in events] == list(range(1, total + 3))
    assert events[-1].type == common_pb2.EVENT_TYPE_STREAM_END


async def test_kill_9_mid_stream_then_resume_loses_and_repeats_nothing(
    shared_env: dict[str, str], tmp_path: Path
) -> None:
    service = EventsProcess(shared_env, tmp_path)
    await service.start()
    workflow_id = f"wf-{uuid.uuid4()}"
    received: list[int] = []
    twenty_received = asyncio.Event()
    acknowledged: list[int] = []
    try:
        async with grpc.aio.insecure_channel(service.target) as channel:
            stub = events_pb2_grpc.EventServiceStub(channel)
            await stub.CreateWorkflow(
                events_pb2.CreateWorkflowRequest(workflow_id=workflow_id), metadata=TENANT
            )

            async def append_with_retry(batch_seq: int) -> None:
                request = events_pb2.AppendRequest(
                    workflow_id=workflow_id,
                    events=[draft("PROGRESS", {"b": batch_seq})],
                    producer_id="writer",
                    batch_seq=batch_seq,
                )
                while True:  # what the executor's sink does: same batch number on retry
                    try:
                        reply = await stub.Append(request, metadata=TENANT, timeout=5)
                        acknowledged.extend(reply.seqs)
                        return
                    except grpc.aio.AioRpcError as exc:
                        if exc.code() not in (
                            grpc.StatusCode.UNAVAILABLE,
                            grpc.StatusCode.DEADLINE_EXCEEDED,
                        ):
                            raise
                        await asyncio.sleep(0.1)

            async def subscriber() -> None:
                while True:  # what an SSE client does: reconnect from the last seq seen
                    stream = stub.Stream(
                        events_pb2.StreamRequest(
                            workflow_id=workflow_id,
                            from_seq=(received[-1] + 1) if received else 1,
                        ),
                        metadata=TENANT,
                    )
                    try:
                        async for event in stream:
                            received.append(event.seq)
                            if len(received) == 20:
                                twenty_received.set()
                        return
                    except grpc.aio.AioRpcError as exc:
                        if exc.code() != grpc.StatusCode.UNAVAILABLE:
                            raise
                        await asyncio.sleep(0.1)

            reading = asyncio.create_task(subscriber())
            for batch_seq in range(1, 21):
                await append_with_retry(batch_seq)
            await asyncio.wait_for(twenty_received.wait(), 30)
            await service.kill()
            restart = asyncio.create_task(service.start())
            for batch_seq in range(21, 41):
                await append_with_retry(batch_seq)
            await restart
            # A retry of an acknowledged batch, as after a reply lost in the crash: same seqs.
            before = list(acknowledged)
            await append_with_retry(40)
            assert acknowledged[len(before) :] == [40]
            del acknowledged[len(before) :]
            await append_with_retry(41)
            await stub.Append(
                events_pb2.AppendRequest(
                    workflow_id=workflow_id, events=[draft("WORKFLOW_COMPLETED")]
                ),
                metadata=TENANT,
            )
            await asyncio.wait_for(reading, 60)
    finally:
        await service.stop()
    assert acknowledged == list(range(1, 42))
    assert received == list(range(1, 44))  # 41 batches, the terminal event, STREAM_END
