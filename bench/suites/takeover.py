"""How long a run waits for another executor once its own has died or is stopping.

Three executors on PostgreSQL and Redis, as `shuttle up --replicas executor=3` lays them out,
with the takeover tests' model (in this process) and tool provider. Each round starts one run
(`ExecutorService.StartRun`), holds its second model call, then ends the executor holding its
lease and lets the held call go (nobody reads its answer); the executor is started again
before the next round. Two ways to end it:

- kill -9: seconds from the kill to the resumed run's first event (ERROR_RECOVERY resumed)
  reaching a `StreamBatches` reader. The aim is the lease plus at most 2 s: the lease must
  lapse, then a replica's takeover poll finds it and the new owner reads the log back.
- SIGTERM: seconds from the signal to the release (the workflow's lease owner changes,
  polled every 10 ms) and to the first event the new owner appends. The aim is under 1 s: a
  stopping executor hands its runs over at once.

    .venv/bin/python -m bench.suites.takeover [--rounds 20] [--lease 1.5] [--poll 0.2]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from bench.support.results import add_common_arguments, save, sized
from bench.support.spread import latency_summary
from shuttle.envelope import to_json_dict
from shuttle.events_client.follow import follow
from shuttle.v1 import common_pb2, events_pb2, events_pb2_grpc, executor_pb2, executor_pb2_grpc
from tests.chaos.effect_provider import EffectProvider
from tests.chaos.harness import is_resumption, is_terminal
from tests.chaos.takeover import Kit, owner_pid
from tests.chaos.takeover_model import TakeoverModel
from tests.chaos.takeover_points import until_arrived
from tests.chaos.takeover_stacks import ReplicatedTarget
from tests.support.replicated_stack import replicated_stack

TENANT = "bench"
COUNTS = {"executor": 3}
RELEASE_POLL_SECONDS = 0.01
WAIT_SECONDS = 120.0


class NotResumed(RuntimeError):
    """The run ended, or stayed stuck, without another executor taking it over."""


async def owner_of(events: events_pb2_grpc.EventServiceAsyncStub, workflow_id: str) -> str:
    request = events_pb2.GetWorkflowRequest(workflow_id=workflow_id, tenant_id=TENANT)
    return str((await events.GetWorkflow(request, timeout=10)).lease_owner)


async def read(
    events: events_pb2_grpc.EventServiceAsyncStub,
    workflow_id: str,
    arrivals: list[tuple[float, dict[str, Any]]],
) -> None:
    async for batch in follow(events, TENANT, workflow_id, 1, 60.0):
        now = time.monotonic()
        arrivals += [(now, to_json_dict(event)) for event in batch]


async def first_resumed(arrivals: list[tuple[float, dict[str, Any]]], workflow_id: str) -> float:
    """When the resumed run's first event arrived."""
    deadline = time.monotonic() + WAIT_SECONDS
    while time.monotonic() < deadline:
        for arrived, event in arrivals:
            if is_resumption(event):
                return arrived
            if is_terminal(event):
                raise NotResumed(f"{workflow_id} ended without a takeover: {event['payload']}")
        await asyncio.sleep(0.005)
    raise NotResumed(f"{workflow_id} was not resumed within {WAIT_SECONDS:.0f} s")


async def released(
    events: events_pb2_grpc.EventServiceAsyncStub,
    workflow_id: str,
    owner: str,
    arrivals: list[tuple[float, dict[str, Any]]],
) -> float:
    """When the workflow's lease owner was first seen to be another than `owner`."""
    deadline = time.monotonic() + WAIT_SECONDS
    while await owner_of(events, workflow_id) == owner:
        ended = [event for _, event in arrivals if is_terminal(event)]
        if ended or time.monotonic() > deadline:
            raise NotResumed(f"{workflow_id} was not handed over: {ended or 'still held'}")
        await asyncio.sleep(RELEASE_POLL_SECONDS)
    return time.monotonic()


async def one_round(
    target: ReplicatedTarget,
    kit: Kit,
    executor: executor_pb2_grpc.ExecutorServiceAsyncStub,
    events: events_pb2_grpc.EventServiceAsyncStub,
    sigterm: bool,
) -> dict[str, float]:
    question = f"bench takeover {uuid.uuid4().hex}"
    hold = kit.model.hold_call(question, tool_results=1)
    started = await executor.StartRun(
        executor_pb2.StartRunRequest(
            query=question, tenant_id=TENANT, mode=common_pb2.MODE_STANDARD
        ),
        timeout=60,
    )
    workflow_id = started.workflow_id
    arrivals: list[tuple[float, dict[str, Any]]] = []
    reader = asyncio.create_task(read(events, workflow_id, arrivals))
    await until_arrived(hold, f"{workflow_id}: its model call is held")
    owner = await owner_of(events, workflow_id)
    name = target.name_of(owner_pid(owner))
    process = target.stack.supervisor.processes[name]
    ended_at = time.monotonic()
    if sigterm:
        process.terminate()
    else:
        await asyncio.to_thread(target.stack.kill, name)
    hold.release()
    figures = {}
    if sigterm:
        figures["released_s"] = await released(events, workflow_id, owner, arrivals) - ended_at
    figures["resumed_s"] = await first_resumed(arrivals, workflow_id) - ended_at
    await asyncio.wait_for(reader, WAIT_SECONDS)
    await asyncio.to_thread(process.wait, 60)
    await asyncio.to_thread(target.revive)
    return figures


async def measure(rounds: int, lease: float, poll: float) -> dict[str, Any]:
    model, provider = TakeoverModel(), EffectProvider().start()
    model.start()
    kit = Kit(model, provider)
    try:
        with tempfile.TemporaryDirectory() as data_dir:
            workspaces = Path(data_dir) / "workspaces"
            env = {
                **kit.environment(workspaces),
                "SHUTTLE_RUN_LEASE_SECONDS": str(lease),
                "SHUTTLE_RUN_TAKEOVER_POLL_SECONDS": str(poll),
                "SHUTTLE_LOG_LEVEL": "WARNING",
            }
            with replicated_stack(Path(data_dir), COUNTS, model.base_url, env) as stack:
                target = ReplicatedTarget(stack, workspaces)
                return await drive(target, kit, rounds)
    finally:
        kit.release_all()
        provider.stop()
        model.stop()


async def drive(target: ReplicatedTarget, kit: Kit, rounds: int) -> dict[str, Any]:
    async with (
        target.channel("executor") as executor_channel,
        target.channel("events") as events_channel,
    ):
        executor: executor_pb2_grpc.ExecutorServiceAsyncStub = (
            executor_pb2_grpc.ExecutorServiceStub(executor_channel)
        )
        events: events_pb2_grpc.EventServiceAsyncStub = events_pb2_grpc.EventServiceStub(
            events_channel
        )
        killed = [await one_round(target, kit, executor, events, False) for _ in range(rounds)]
        stopped = [await one_round(target, kit, executor, events, True) for _ in range(rounds)]
    return {
        "kill_to_resumed_ms": latency_summary([r["resumed_s"] * 1000 for r in killed]),
        "sigterm_to_release_ms": latency_summary([r["released_s"] * 1000 for r in stopped]),
        "sigterm_to_resumed_ms": latency_summary([r["resumed_s"] * 1000 for r in stopped]),
    }


def seconds(summary: dict[str, float]) -> str:
    return f"p50 {summary['p50'] / 1000:.2f} s, p99 {summary['p99'] / 1000:.2f} s"


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, help="runs per way of ending (20; quick 5)")
    parser.add_argument("--lease", type=float, default=1.5, help="SHUTTLE_RUN_LEASE_SECONDS")
    parser.add_argument("--poll", type=float, default=0.2, help="SHUTTLE_RUN_TAKEOVER_POLL_SECONDS")
    add_common_arguments(parser)
    args = parser.parse_args()
    rounds = sized(args.rounds, args.quick, full=20, small=5)
    figures = await measure(rounds, args.lease, args.poll)
    print(f"3 executors, lease {args.lease:g} s, takeover poll {args.poll:g} s, {rounds} runs each")
    print(
        f"kill -9 of the owner → the resumed run's first event: "
        f"{seconds(figures['kill_to_resumed_ms'])} (aim: ≤ lease + 2 s = {args.lease + 2:g} s)"
    )
    print(
        f"SIGTERM of the owner → its release: {seconds(figures['sigterm_to_release_ms'])}; "
        f"→ the new owner's first event: {seconds(figures['sigterm_to_resumed_ms'])} "
        "(aim: < 1 s)",
        flush=True,
    )
    settings = {"rounds": rounds, "lease_s": args.lease, "poll_s": args.poll, "executors": 3}
    save(args.json, "takeover", settings, figures)


if __name__ == "__main__":
    asyncio.run(main())
